"""A daemon's config file for a night: the store, the Chroma server, its API port, the scripted
model, the concurrency and the limits, and no schedule (the night is one dream request).

Options this checkout does not know yet (``[jobs] concurrency``, ``[llm]
max_requests_per_minute``) are left out rather than refused by the loader; the results say which
were set (``applied``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from secretary.jobs.registry import JOB_NAMES
from secretary.jobs.settings import JobsSettings
from secretary.llm.settings import LlmSettings

SCRIPTED_MODEL = "openai/scripted"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def toml(top: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [f"{key} = {_value(value)}" for key, value in top.items()]
    for name, values in sections.items():
        lines += ["", f"[{name}]", *(f"{key} = {_value(value)}" for key, value in values.items())]
    return "\n".join(lines) + "\n"


def known(section: type[Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``wanted`` that ``section`` (a settings model) has."""
    return {key: value for key, value in wanted.items() if key in section.model_fields}


def daemon_config(
    *,
    data_dir: Path,
    database_url: str,
    chroma_url: str,
    port: int,
    api_base: str,
    jobs: Mapping[str, Any],
    llm: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """The TOML text of one daemon's config, and the options it set that vary per night."""
    jobs_set = known(JobsSettings, jobs)
    llm_set = known(LlmSettings, llm)
    text = toml(
        {"data_dir": str(data_dir)},
        {
            "database": {"url": database_url},
            "index": {"chroma_url": chroma_url},
            "api": {"host": "127.0.0.1", "port": port},
            "llm": {"model": SCRIPTED_MODEL, "api_base": api_base, "api_key": "bench", **llm_set},
            "jobs": jobs_set,
            "schedule": dict.fromkeys(JOB_NAMES, ""),
        },
    )
    return text, {"jobs": jobs_set, "llm": llm_set}
