"""Settings: one TOML file plus ``SECRETARY_*`` environment overrides, validated and frozen.

Every option is documented in ``docs/secretary.example.toml`` with its default. Each section is
defined by the part that reads it (``store.settings``, ``secretary.llm.settings``,
``secretary.jobs.settings``); this module composes them, adds the daemon's ``[schedule]`` (one
cron expression per registered job) and is the only entry point: ``load_settings``. Errors name
the offending key.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, Field, ValidationError, create_model, field_validator

from secretary.cron import InvalidSchedule, validate_cron, zone
from secretary.jobs.registry import JOBS
from secretary.jobs.settings import GuardrailSettings, JobsSettings
from secretary.llm.settings import LlmSettings
from store.errors import SecretaryError
from store.settings import Section, StoreSettings

ENV_PREFIX = "SECRETARY_"
# SECRETARY_* variables that are no option, so no override. Any other SECRETARY_* name must
# be an option (SECRETARY_SECTION_KEY, SECRETARY_DATA_DIR) or is refused, naming the known ones.
# The commands': the config file, --api-key and --namespace.
COMMAND_VARIABLES = frozenset({"SECRETARY_CONFIG", "SECRETARY_API_KEY", "SECRETARY_NAMESPACE"})
# The tests' and CI's (tests/conftest.py, tests/helpers/browser.py, .ci/run, ...); a test of
# `secretary serve` also sets SECRETARY_LOG_LEVEL, which nothing reads (--log-level has no
# variable).
TEST_VARIABLES = frozenset(
    {
        "SECRETARY_LOG_LEVEL",
        "SECRETARY_REQUIRE_POSTGRES",
        "SECRETARY_REQUIRE_CHROMA_SERVER",
        "SECRETARY_REQUIRE_SYSTEMD_ANALYZE",
        "SECRETARY_REQUIRE_BROWSER",
        "SECRETARY_TEST_POSTGRES_URL",
        "SECRETARY_UPDATE_GOLDEN",
        "SECRETARY_SCREENSHOTS",
        "SECRETARY_CHROMIUM",
    }
)
NOT_OPTIONS = COMMAND_VARIABLES | TEST_VARIABLES


class ConfigError(SecretaryError):
    """The configuration file or environment is invalid."""

    exit_code = 2


class ScheduleBase(Section):
    """When `secretary run` starts each job (a cron expression; "" = never) and how it runs them.

    ``ScheduleSettings`` adds one field per registered job, defaulting to the job's
    ``default_cron``. `secretary schedule set/pause/resume` store overrides in the database;
    they win over these.
    """

    # Cron expressions are read in this IANA time zone (e.g. "Europe/Berlin").
    timezone: str = "UTC"
    # A run that could not start on time (daemon busy, suspended or stopped) still starts if it
    # is at most this late; several missed runs of one job become one when `coalesce` is on.
    misfire_grace_seconds: int = Field(default=3600, ge=1)
    coalesce: bool = True
    # No longer read: `[jobs] concurrency` says how many runs go at once. Kept so that a config
    # file that sets it still loads.
    workers: int = Field(default=2, ge=1, le=32)
    # How often the daemon re-reads schedule changes made with `secretary schedule`.
    poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    # On SIGTERM, how long to wait for the running job before exiting anyway (its transaction
    # is then rolled back). Keep it below the unit's TimeoutStopSec.
    stop_timeout_seconds: float = Field(default=60.0, ge=0)
    # The store's daemon lease: renewed every third of this; a dead daemon's lease can be taken
    # over once it has expired. Keep it well above the clock skew between hosts.
    lease_seconds: float = Field(default=60.0, ge=5)
    # Ping systemd's watchdog (when the unit sets WatchdogSec=) while the daemon is healthy.
    watchdog: bool = True

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zone(value)
        except InvalidSchedule as exc:
            raise ValueError(str(exc)) from None
        return value

    def cron(self, job: str) -> str:
        """Return the configured cron expression of ``job`` ("" = not scheduled)."""
        return str(getattr(self, job))


def _valid_cron(value: str) -> str:
    if not value.strip():
        return ""
    try:
        return validate_cron(value)
    except InvalidSchedule as exc:
        raise ValueError(str(exc)) from None


if TYPE_CHECKING:  # a model made at run time; type checkers know it by its base
    ScheduleSettings = ScheduleBase
else:
    # One field per job of the registry, in its order; its default is the job's own.
    ScheduleSettings = create_model(
        "ScheduleSettings",
        __base__=ScheduleBase,
        __validators__={"_valid_cron": field_validator(*JOBS)(_valid_cron)},
        **{name: (str, job.default_cron) for name, job in JOBS.items()},
    )


class Settings(StoreSettings):
    """Every setting: the store's sections plus the daemon's."""

    llm: LlmSettings = LlmSettings()
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    jobs: JobsSettings = JobsSettings()
    guardrails: GuardrailSettings = GuardrailSettings()

    def redacted(self) -> dict[str, Any]:
        """Return the effective settings as plain data with every secret replaced by ``***``."""
        data = self.model_dump(mode="json")
        for section, key in (("index", "embedder_api_key"), ("llm", "api_key")):
            if data[section][key]:
                data[section][key] = "***"
        data["api"]["keys"] = [{**k, "key": "***"} for k in data["api"]["keys"]]  # not a letter
        if "@" in data["database"]["url"]:
            scheme, _, rest = data["database"]["url"].partition("://")
            data["database"]["url"] = f"{scheme}://***@{rest.rpartition('@')[2]}"
        return data


def load_settings(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    data_dir: Path | None = None,
) -> Settings:
    """Given an optional TOML file and the environment, return validated frozen settings.

    ``path`` defaults to ``$SECRETARY_CONFIG``; ``data_dir`` (the CLI's ``--data-dir``) wins over
    the file and ``$SECRETARY_DATA_DIR``. Raise ConfigError naming the key if anything is invalid.
    """
    env = os.environ if environ is None else environ
    if path is None and env.get("SECRETARY_CONFIG"):
        path = Path(env["SECRETARY_CONFIG"])
    raw: dict[str, Any] = _read_toml(path) if path is not None else {}
    given = _apply_env(raw, env)
    if data_dir is not None:
        raw["data_dir"] = str(data_dir)
        given[("data_dir",)] = "--data-dir"
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, given)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Overlay ``SECRETARY_SECTION_KEY=value`` (and ``SECRETARY_DATA_DIR``) onto the raw config;
    return which options the environment gave (option path -> variable), for error messages.

    Raise ConfigError naming the known sections if a ``SECRETARY_*`` name is none of them.
    """
    sections = {name for name in Settings.model_fields if name != "data_dir"}
    given: dict[tuple[str, ...], str] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in NOT_OPTIONS:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        if rest == "data_dir":
            raw["data_dir"] = value
            given[("data_dir",)] = f"environment variable {name}"
            continue
        section, _, key = rest.partition("_")
        if section not in sections or not key:
            raise ConfigError(_unknown_variable(name, sorted(sections)))
        raw.setdefault(section, {})
        if isinstance(raw[section], dict):
            raw[section][key] = value
            given[(section, key)] = f"environment variable {name}"
    return given


def _unknown_variable(name: str, sections: list[str]) -> str:
    prefixes = [f"{ENV_PREFIX}{section.upper()}_" for section in sections]
    others = sorted({f"{ENV_PREFIX}DATA_DIR", *COMMAND_VARIABLES})
    head, _, tail = name[len(ENV_PREFIX) :].partition("_")
    close = difflib.get_close_matches(f"{ENV_PREFIX}{head}_", prefixes, n=1)
    guess = f" (did you mean {close[0]}{tail}?)" if close and tail else ""
    known = ", ".join(prefix + "*" for prefix in prefixes)
    return (
        f"environment variable {name} is no config option{guess}: the sections are {known}; "
        f"besides them: {', '.join(others)}"
    )


def _describe(exc: ValidationError, path: Path | None, given: Mapping[tuple[str, ...], str]) -> str:
    """One line per problem, naming where the bad value came from: the environment variable
    or command-line option that gave it (``given``), else the config file."""
    in_file = f" in {path}" if path else ""
    lines = []
    for error in exc.errors():
        loc = tuple(str(part) for part in error["loc"])
        key = ".".join(loc) or "(top level)"
        source = next((given[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in given), None)
        where = f" (from {source})" if source else in_file
        message = (
            "unknown option" + _guess(loc)
            if error["type"] == "extra_forbidden"
            else str(error["msg"]).removeprefix("Value error, ")
        )
        lines.append(f"config option '{key}'{where}: {message}")
    return "\n".join(lines)


def _guess(loc: tuple[str, ...]) -> str:
    """Given an unknown option's place, say which known option of its section it is close to."""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        if part.isdigit():  # an entry of a list of tables, such as api.keys.0
            continue
        field = model.model_fields.get(part)
        kind: Any = field.annotation if field is not None else None
        kind = next(iter(get_args(kind)), kind)  # list[ApiKey] -> ApiKey
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return ""
        model = kind
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1) if loc else []
    return f" (did you mean {close[0]!r}?)" if close else ""
