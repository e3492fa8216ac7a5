"""Settings: TOML plus environment overrides, validated, errors naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from secretary.config import ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "secretary.toml"
    path.write_text(text)
    return path


def test_load_settings_no_file_gives_defaults() -> None:
    settings = load_settings(None, {})
    assert settings == Settings()
    assert settings.api.host == "127.0.0.1"
    assert settings.database_url.startswith("sqlite:///")


def test_load_settings_example_file_matches_defaults() -> None:
    example = load_settings(REPO / "docs" / "secretary.example.toml", {})
    assert example == Settings()


def test_load_settings_env_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nmodel = "openai/a"\n[api]\nport = 9000\n')
    settings = load_settings(
        path, {"SECRETARY_LLM_MODEL": "openai/b", "SECRETARY_DATA_DIR": str(tmp_path)}
    )
    assert settings.llm.model == "openai/b"
    assert settings.api.port == 9000
    assert settings.data_dir == tmp_path


def test_load_settings_config_from_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "[api]\nport = 9001\n")
    assert load_settings(None, {"SECRETARY_CONFIG": str(path)}).api.port == 9001


def test_load_settings_data_dir_argument_wins(tmp_path: Path) -> None:
    settings = load_settings(None, {"SECRETARY_DATA_DIR": "/elsewhere"}, data_dir=tmp_path)
    assert settings.data_dir == tmp_path


def test_load_settings_misspelt_environment_section_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"SECRETARY_DATABSE_URL": "postgresql://db/x"})
    message = str(caught.value)
    assert "SECRETARY_DATABSE_URL" in message
    assert "did you mean SECRETARY_DATABASE_URL?" in message
    assert "SECRETARY_LLM_*" in message
    assert "SECRETARY_DATA_DIR" in message
    with pytest.raises(ConfigError, match="SECRETARY_NOSUCH is no config option"):
        load_settings(None, {"SECRETARY_NOSUCH": "1"})
    # A known section with an unknown key is the option's own error, as in a file.
    with pytest.raises(ConfigError, match=r"'database\.urll'.*unknown option"):
        load_settings(None, {"SECRETARY_DATABASE_URLL": "x"})


def test_load_settings_every_secretary_variable_the_project_uses_is_allowed() -> None:
    """Each SECRETARY_* name this repository sets or reads is an option or a known exemption,
    so that making unknown sections an error breaks none of the project's own commands."""
    names: set[str] = set()
    for folder in ("secretary", "store", "tests", "bench", "docs", "systemd", ".ci"):
        for path in (REPO / folder).rglob("*"):
            if path == Path(__file__):
                continue  # its misspellings are on purpose
            if path.is_file() and path.suffix in {
                "",
                ".py",
                ".md",
                ".toml",
                ".service",
                ".example",
            }:
                names |= set(re.findall(r"\bSECRETARY_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    names -= {"SECRETARY_SECTION_KEY"}  # the docs' placeholder
    used = {name: "x" for name in names if not name.endswith("_")}
    refused = []
    for name in sorted(used):
        try:
            load_settings(None, {name: "1"}, data_dir=REPO)
        except ConfigError as exc:
            if "is no config option" in str(exc):
                refused.append(name)
    assert refused == []
    assert len(used) > 20


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[api]\nprot = 1\n", {}, "config option 'api.prot'.*unknown option"),
        ('[llm]\nmodle = "x"\n', {}, r"'llm\.modle'.*unknown option \(did you mean 'model'\?\)"),
        ('[schedule]\nlinkr = "x"\n', {}, r"unknown option \(did you mean 'linker'\?\)"),
        (
            '[[api.keys]]\nkey = "abcdefghijkl"\nnamespaces = ["a"]\nnmae = "x"\n',
            {},
            r"'api\.keys\.0\.nmae'.*unknown option \(did you mean 'name'\?\)",
        ),
        ("[api]\nzzzz = 1\n", {}, r"'api\.zzzz'.*unknown option$"),
        ("[api]\nport = 0\n", {}, "config option 'api.port'"),
        ("", {"SECRETARY_API_PORT": "http"}, "config option 'api.port'"),
        ("[retrieval]\nw_sim = -1\n", {}, "config option 'retrieval.w_sim'"),
        ("[api\n", {}, "not valid TOML"),
        ('[[api.keys]]\nkey = "short"\nnamespaces = ["a"]\n', {}, "api.keys.0.key"),
    ],
)
def test_load_settings_invalid_raises_naming_key(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text), env)


def test_load_settings_invalid_value_blamed_on_where_it_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "[api]\nport = 0\n[llm]\nmodel = 'openai/x'\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path, {"SECRETARY_LLM_MAX_REQUESTS_PER_MINUTE": "soon"})
    lines = str(raised.value).splitlines()
    assert lines[0] == f"config option 'api.port' in {path}: " + lines[0].split(": ", 1)[1]
    assert len(lines) == 2
    origin = "(from environment variable SECRETARY_LLM_MAX_REQUESTS_PER_MINUTE)"
    assert f"'llm.max_requests_per_minute' {origin}" in lines[1]
    assert str(path) not in lines[1]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("garbage", "'garbage' is not an http:// or https:// URL"),
        ("127.0.0.1:8000", "is not an http:// or https:// URL"),
        ("ftp://chroma.example", "is not an http:// or https:// URL"),
        ("http://", "is not an http:// or https:// URL"),
        ("http://:8000", "names no host"),
        ("http://127.0.0.1:70000", "has no valid port"),
        ("http://127.0.0.1:0", "has no valid port"),
        ("http://127.0.0.1:port", "has no valid port"),
        ("http://chroma host:8000", "'chroma host' is not an IP address or a host name"),
        ("http://127.0.0.1:8000/api", "holds more than a host and a port"),
    ],
)
def test_load_settings_chroma_url_not_an_http_url_names_the_option(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"SECRETARY_INDEX_CHROMA_URL": url})

    said = str(caught.value)
    origin = "(from environment variable SECRETARY_INDEX_CHROMA_URL)"
    assert said.startswith(f"config option 'index.chroma_url' {origin}: {url!r}"), said
    assert why in str(caught.value)
    assert "Value error" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    ["", "http://127.0.0.1:8000", "https://chroma.example/", "http://[::1]:8000", "http://chroma"],
)
def test_load_settings_chroma_url_empty_or_http_host_port_accepted(url: str) -> None:
    assert load_settings(None, {"SECRETARY_INDEX_CHROMA_URL": url}).index.chroma_url == url


@pytest.mark.parametrize("host", ["", "my host", "127.0.0.1:8765", "[::1]", "-bad-"])
def test_load_settings_api_host_not_an_address_names_the_option(host: str) -> None:
    origin = r"\(from environment variable SECRETARY_API_HOST\)"
    with pytest.raises(ConfigError, match=rf"config option 'api\.host' {origin}: .* is not an IP"):
        load_settings(None, {"SECRETARY_API_HOST": host})


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "localhost", "api_1.internal"])
def test_load_settings_api_host_address_or_name_accepted(host: str) -> None:
    assert load_settings(None, {"SECRETARY_API_HOST": host}).api.host == host


def test_load_settings_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", {})


def test_redacted_hides_secrets(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[llm]\napi_key = "sk-secret"\n[database]\nurl = "postgresql://u:pw@h/db"\n'
        '[[api.keys]]\nkey = "abcdefghijkl"\nnamespaces = ["a"]\n',
    )
    redacted = load_settings(path, {}).redacted()
    shown = str(redacted)
    assert "sk-secret" not in shown
    assert "pw" not in shown
    assert "abcdefghijkl" not in shown
    assert redacted["api"]["keys"][0]["key"] == "***"  # not even its first letters


def _options(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every option of a settings model, as dotted names (a list of tables counts as one)."""
    found = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found.extend(_options(kind, f"{prefix}{name}."))
        else:
            found.append(f"{prefix}{name}")
    return found


def test_example_config_shows_every_option_with_its_default() -> None:
    text = (REPO / "docs" / "secretary.example.toml").read_text(encoding="utf-8")
    section = ""
    shown = set()
    for line in text.splitlines():
        bare = line.lstrip("# ").strip()
        if bare.startswith("[") and bare.endswith("]"):
            section = bare.strip("[]") + "."
        elif re.match(r"^\w+ = ", bare):
            shown.add(section + bare.split(" = ")[0])
    # A list of tables ([[api.keys]]) is shown by an example entry, commented out.
    shown = {"api.keys" if option.startswith("api.keys.") else option for option in shown}
    assert sorted(set(_options(Settings)) - shown) == []
