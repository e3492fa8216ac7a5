"""Settings: one TOML file plus ``SECRETARY_*`` environment overrides, validated and frozen.

Every option is documented in ``docs/configuration.md`` with an example. ``load_settings`` is the
only entry point; errors name the offending key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from secretary.errors import ConfigError

ENV_PREFIX = "SECRETARY_"
DEFAULT_DATA_DIR = Path("~/.local/share/memory-secretary")


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DatabaseSettings(_Section):
    # Empty means SQLite in the data directory.
    url: str = ""


class IndexSettings(_Section):
    # Empty means an embedded Chroma (PersistentClient) under the data directory.
    chroma_url: str = ""
    embedder: Literal["onnx", "litellm"] = "onnx"
    embedder_model: str = ""
    embedder_api_base: str = ""
    embedder_api_key: str = ""
    # Memories embedded per outbox batch.
    batch_size: int = Field(default=256, ge=1, le=10_000)


class ApiKey(_Section):
    key: str = Field(min_length=8)
    namespaces: tuple[str, ...] = Field(min_length=1)
    name: str = ""


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    # With no keys the API is open; it then still binds only the configured host.
    keys: tuple[ApiKey, ...] = ()
    max_k: int = Field(default=100, ge=1, le=1000)


class IngestSettings(_Section):
    max_content_chars: int = Field(default=8000, ge=1)
    max_batch: int = Field(default=1000, ge=1)
    max_tags: int = Field(default=32, ge=0)
    max_tag_chars: int = Field(default=64, ge=1)
    # Lines committed per transaction by `secretary ingest`.
    commit_every: int = Field(default=1000, ge=1)


class RetrievalSettings(_Section):
    """Weights of the final score and the shape of the search; defaults come from bench/locomo."""

    w_sim: float = Field(default=1.0, ge=0)
    w_imp: float = Field(default=0.1, ge=0)
    w_rec: float = Field(default=0.05, ge=0)
    w_act: float = Field(default=0.4, ge=0)
    # Importance decays with this half-life (lambda = ln 2 / half-life); 0 turns decay off.
    half_life_days: float = Field(default=90.0, ge=0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    # Parts of the relevance score.
    w_lexical: float = Field(default=1.0, ge=0)
    w_dense: float = Field(default=1.0, ge=0)
    w_session: float = Field(default=0.75, ge=0)
    w_period: float = Field(default=0.1, ge=0)
    anchors: int = Field(default=50, ge=1, le=1000)
    dense_candidates: int = Field(default=200, ge=1, le=5000)
    lexical_candidates: int = Field(default=100, ge=1, le=5000)
    spread_depth: int = Field(default=1, ge=0, le=4)
    spread_fanout: int = Field(default=8, ge=0, le=100)
    spread_decay: float = Field(default=0.4, ge=0, le=1)
    spread_seeds: int = Field(default=30, ge=0, le=1000)
    min_score: float = 0.0


class ReinforcementSettings(_Section):
    flush_seconds: float = Field(default=5.0, gt=0)
    # base_importance grows by this per recall, never beyond +max_boost over its original value.
    importance_step: float = Field(default=0.1, ge=0)
    max_boost: float = Field(default=2.0, ge=0)


class LlmSettings(_Section):
    model: str = ""
    api_base: str = ""
    api_key: str = ""
    # Per HTTP attempt; a call takes at most about max_attempts * timeout + retry_max_seconds.
    timeout_seconds: float = Field(default=60.0, gt=0)
    # Cap on each reply's tokens (litellm's max_tokens); budgets count it before each call.
    max_reply_tokens: int = Field(default=4096, ge=1)
    # Transient failures (429, timeouts, connection errors, 5xx) are retried with jittered
    # exponential backoff, within both bounds.
    max_attempts: int = Field(default=4, ge=1, le=20)
    retry_max_seconds: float = Field(default=120.0, ge=0)
    backoff_initial_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=30.0, ge=0)
    # Token budgets (prompt + completion) per job run and per namespace per UTC day; 0 = none.
    max_tokens_per_run: int = Field(default=0, ge=0)
    max_tokens_per_day: int = Field(default=0, ge=0)


class Settings(_Section):
    data_dir: Path = Field(default=DEFAULT_DATA_DIR, validate_default=True)
    database: DatabaseSettings = DatabaseSettings()
    index: IndexSettings = IndexSettings()
    api: ApiSettings = ApiSettings()
    ingest: IngestSettings = IngestSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    reinforcement: ReinforcementSettings = ReinforcementSettings()
    llm: LlmSettings = LlmSettings()
    # Defined at the end of the module; the lambda defers the name until a Settings is built.
    schedule: ScheduleSettings = Field(default_factory=lambda: ScheduleSettings())
    jobs: JobsSettings = Field(default_factory=lambda: JobsSettings())
    guardrails: GuardrailSettings = Field(default_factory=lambda: GuardrailSettings())

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="after")
    def _unique_keys(self) -> Settings:
        keys = [k.key for k in self.api.keys]
        if len(keys) != len(set(keys)):
            raise ValueError("api.keys: the same key appears twice")
        return self

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite:///{self.data_dir / 'secretary.db'}"

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    def redacted(self) -> dict[str, Any]:
        """Return the effective settings as plain data with every secret replaced by ``***``."""
        data = self.model_dump(mode="json")
        for section, key in (("index", "embedder_api_key"), ("llm", "api_key")):
            if data[section][key]:
                data[section][key] = "***"
        data["api"]["keys"] = [{**k, "key": k["key"][:2] + "***"} for k in data["api"]["keys"]]
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
    _apply_env(raw, env)
    if data_dir is not None:
        raw["data_dir"] = str(data_dir)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    """Overlay ``SECRETARY_SECTION_KEY=value`` (and ``SECRETARY_DATA_DIR``) onto the raw config."""
    sections = {name for name, field in Settings.model_fields.items() if name != "data_dir"}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == "SECRETARY_CONFIG":
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        if rest == "data_dir":
            raw["data_dir"] = value
            continue
        section, _, key = rest.partition("_")
        if section in sections and key:
            raw.setdefault(section, {})
            if isinstance(raw[section], dict):
                raw[section][key] = value


def _describe(exc: ValidationError, path: Path | None) -> str:
    where = f" in {path}" if path else ""
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = "unknown option" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"config option '{key}'{where}: {message}")
    return "\n".join(lines)


# -- the daemon's schedule -------------------------------------------------------------------

# The scheduled jobs, in the order `secretary schedule show` lists them.
SCHEDULED_JOBS = ("extractor", "linker", "auditor", "soul_mapper", "consolidator", "retention")


class ScheduleSettings(_Section):
    """When `secretary run` starts each job (a cron expression; "" = never) and how it runs them.

    `secretary schedule set/pause/resume` store overrides in the database; they win over these.
    """

    # Cron expressions are read in this IANA time zone (e.g. "Europe/Berlin").
    timezone: str = "UTC"
    extractor: str = "*/15 * * * *"
    linker: str = "20 * * * *"
    auditor: str = "40 4 * * *"
    soul_mapper: str = "0 5 * * 0"
    consolidator: str = "0 3 * * *"
    retention: str = "30 2 * * *"
    # A run that could not start on time (daemon busy, suspended or stopped) still starts if it
    # is at most this late; several missed runs of one job become one when `coalesce` is on.
    misfire_grace_seconds: int = Field(default=3600, ge=1)
    coalesce: bool = True
    # Jobs that may run at once (on different namespaces; one namespace runs one job at a time).
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
        from secretary.scheduler import InvalidSchedule, zone

        try:
            zone(value)
        except InvalidSchedule as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator(*SCHEDULED_JOBS)
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        from secretary.scheduler import InvalidSchedule, validate_cron

        if not value.strip():
            return ""
        try:
            return validate_cron(value)
        except InvalidSchedule as exc:
            raise ValueError(str(exc)) from None

    def cron(self, job: str) -> str:
        """Return the configured cron expression of ``job`` ("" = not scheduled)."""
        return str(getattr(self, job))


# -- the maintenance jobs and their guardrails -----------------------------------------------


class JobsSettings(_Section):
    """How the maintenance jobs work. Keys are flat (``linker_threshold``, not a sub-table) so
    that every one can be overridden from the environment, e.g. SECRETARY_JOBS_BATCH_SIZE.
    """

    # "off": plans apply at once. "changes": plans that change existing memories (merge,
    # supersede, archive, purge) wait for `secretary plans approve`; additions apply at once.
    # "all": every plan waits.
    approval: Literal["off", "changes", "all"] = "off"
    # Items (log lines, memories) sent to the LLM per call.
    batch_size: int = Field(default=20, ge=1, le=500)
    # Most LLM calls one job run makes; what is left waits for the next run.
    max_llm_calls_per_run: int = Field(default=10, ge=1, le=1000)
    # Most new items (log lines, memories) one job run reads.
    max_items_per_run: int = Field(default=500, ge=1, le=100_000)
    # linker: an associative edge joins two memories at least this similar (cosine), at most
    # linker_max_edges per new memory; linker_typed asks the LLM for causal/thematic edges.
    linker_threshold: float = Field(default=0.7, ge=0, le=1)
    linker_max_edges: int = Field(default=5, ge=0, le=100)
    linker_typed: bool = True
    # auditor: memories this similar are near duplicates judged together; preferences sharing a
    # tag or this similar are about the same subject. Groups hold at most auditor_max_group.
    auditor_near_threshold: float = Field(default=0.85, ge=0, le=1)
    auditor_subject_threshold: float = Field(default=0.6, ge=0, le=1)
    auditor_max_group: int = Field(default=6, ge=2, le=50)
    # consolidator: event fragments within this many minutes of a cluster's first one and at
    # least this similar to the cluster become one summary, once the window has passed.
    consolidator_window_minutes: float = Field(default=180.0, gt=0)
    consolidator_threshold: float = Field(default=0.5, ge=0, le=1)
    consolidator_min_fragments: int = Field(default=2, ge=2, le=100)
    consolidator_max_fragments: int = Field(default=12, ge=2, le=100)
    # soul_mapper: most existing traits shown to the LLM (the most recent ones).
    soul_mapper_max_traits: int = Field(default=50, ge=0, le=1000)
    # retention: tombstones (superseded, merged, archived) untouched for this many days are
    # purged; until then every change can be undone.
    retention_undo_days: float = Field(default=30.0, ge=0)


class GuardrailSettings(_Section):
    """Limits on what one job run may change, checked before anything is written."""

    # Protected memories are never merged, superseded, archived or rewritten by a job: pinned
    # ones, those with importance >= protect_importance (11 = none) and those recalled in the
    # last protect_accessed_days days (0 = none), unless allow_protected_changes is on.
    protect_importance: int = Field(default=9, ge=1, le=11)
    protect_accessed_days: float = Field(default=7.0, ge=0)
    allow_protected_changes: bool = False
    # A plan changing more existing memories than max_changes_per_run (0 = no limit), or more
    # than max_change_share of the namespace's active memories (once it changes more than
    # change_share_floor), is refused and recorded; nothing of it is applied.
    max_changes_per_run: int = Field(default=200, ge=0)
    max_change_share: float = Field(default=0.25, gt=0, le=1)
    change_share_floor: int = Field(default=20, ge=0)


Settings.model_rebuild()
