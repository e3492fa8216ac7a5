"""The settings sections the store reads: database, index, API, ingest, retrieval, recall.

Frozen pydantic models; ``secretary.config`` composes them with the daemon's sections into the
one ``Settings`` that ``load_settings`` returns. Defaults are the documented ones
(``docs/secretary.example.toml``; a test keeps the two equal).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_DATA_DIR = Path("~/.local/share/memory-secretary")
# The namespace of a command or request that names none (and of an API without keys).
DEFAULT_NAMESPACE = "default"


class Section(BaseModel):
    """A frozen settings section that refuses unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# A host name as DNS spells it (letters, digits, hyphens; underscores too, as container names
# have), at most 63 characters a label and 253 in all.
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def check_host(host: str) -> str:
    """Return ``host`` if it is an IP address or a host name; raise ValueError saying why not."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or not _HOST_NAME.fullmatch(host):
            raise ValueError(
                f"{host!r} is not an IP address or a host name (e.g. 127.0.0.1, ::1, localhost)"
            ) from None
    return host


def check_http_url(url: str) -> str:
    """Return ``url`` if it is http(s)://HOST[:PORT] (a trailing "/" allowed); raise ValueError
    saying what is wrong otherwise."""
    example = "expected http(s)://HOST[:PORT], e.g. http://127.0.0.1:8000"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "http://[::1": an unclosed IPv6 address
        raise ValueError(f"{url!r} is not a URL ({exc}): {example}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL: {example}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} has no valid port (a number 1-65535): {example}") from None
    if port == 0:
        raise ValueError(f"{url!r} has no valid port (a number 1-65535): {example}")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host: {example}")
    try:
        check_host(parts.hostname)
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}") from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"{url!r} holds more than a host and a port: {example}")
    return url


class DatabaseSettings(Section):
    # Empty means SQLite in the data directory.
    url: str = ""


class IndexSettings(Section):
    # Empty means an embedded Chroma (PersistentClient) under the data directory.
    chroma_url: str = ""
    embedder: Literal["onnx", "litellm"] = "onnx"
    embedder_model: str = ""
    embedder_api_base: str = ""
    embedder_api_key: str = ""
    # Memories embedded per outbox batch.
    batch_size: int = Field(default=256, ge=1, le=10_000)

    @field_validator("chroma_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_http_url(value) if value else value


class LexicalSettings(Section):
    # Save each namespace's BM25 index beside the store (memory-mapped, shared by the processes
    # that use the same directory) instead of building it from SQL in every process at start.
    persist: bool = True
    # Empty: <data_dir>/lexical. Replicas that share a disk share it (and its pages).
    path: str = ""
    # New or changed memories searched in a second, small index before they are merged into
    # the saved one (or 1% of the namespace, if more).
    max_tail: int = Field(default=2000, ge=0)


ALL_NAMESPACES = "*"


class ApiKey(Section):
    key: str = Field(min_length=8)
    # The namespaces the key may read and write; ["*"] (alone) is an admin key: every namespace.
    namespaces: tuple[str, ...] = Field(min_length=1)
    name: str = ""

    @field_validator("namespaces")
    @classmethod
    def _star_alone(cls, namespaces: tuple[str, ...]) -> tuple[str, ...]:
        if ALL_NAMESPACES in namespaces and len(namespaces) > 1:
            raise ValueError('"*" (every namespace) cannot be listed with other namespaces')
        return namespaces

    @property
    def admin(self) -> bool:
        """Whether the key may use every namespace."""
        return self.namespaces == (ALL_NAMESPACES,)


class ApiSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    # With no keys the API is open; it then still binds only the configured host.
    keys: tuple[ApiKey, ...] = ()
    max_k: int = Field(default=100, ge=1, le=1000)
    # Largest request body accepted, in bytes (413 beyond): a full batch of long memories fits.
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)


class IngestSettings(Section):
    max_content_chars: int = Field(default=8000, ge=1)
    max_batch: int = Field(default=1000, ge=1)
    max_tags: int = Field(default=32, ge=0)
    max_tag_chars: int = Field(default=64, ge=1)
    # Largest metadata object of one memory, in bytes of JSON.
    max_metadata_bytes: int = Field(default=16384, ge=2)
    # Lines committed per transaction by `secretary ingest`.
    commit_every: int = Field(default=1000, ge=1)


# The min_score agents search with (MCP, the Python client's recall): a search whose best hit's
# relevance (store.search.scoring.relevance) is below it answers nothing ("nothing relevant").
# Chosen by bench/relevance.py on tune halves: the highest threshold costing at most 1 point of
# recall@10 at home (docs/retrieval.md#relevance). The plain API keeps min_score 0 unless asked.
AGENT_MIN_SCORE = 0.35


class RetrievalSettings(Section):
    """Weights of the final score and the shape of the search; defaults come from bench/locomo."""

    w_sim: float = Field(default=1.0, ge=0)
    w_imp: float = Field(default=0.1, ge=0)
    w_rec: float = Field(default=0.05, ge=0)
    w_act: float = Field(default=0.4, ge=0)
    # Importance decays with this half-life (lambda = ln 2 / half-life); 0 turns decay off.
    half_life_days: float = Field(default=90.0, ge=0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    # Parts of the relevance score.
    w_lexical: float = Field(default=1.5, ge=0)
    # The lexical part is (BM25 / the query's best BM25) ** lexical_exponent: above 1, a memory
    # that matches a few of the query's words falls further behind the best match.
    lexical_exponent: float = Field(default=1.5, gt=0, le=10)
    w_dense: float = Field(default=1.0, ge=0)
    w_session: float = Field(default=0.75, ge=0)
    w_period: float = Field(default=0.1, ge=0)
    anchors: int = Field(default=50, ge=1, le=1000)
    dense_candidates: int = Field(default=200, ge=1, le=5000)
    lexical_candidates: int = Field(default=100, ge=1, le=5000)
    # BM25 also reads each memory together with the memory before it in its session, if at most
    # 12 hours before (a reply holds few of the question's words; the turn it answers holds
    # them): the lexical part is the better of its own score and this weight x that one, each
    # over its best. 0: off.
    lexical_context: float = Field(default=0.8, ge=0, le=1)
    # A reading's lexical evidence counts in full when one of its three best BM25 matches holds
    # at least this share of the query's terms (IDF-weighted, with the memory before it when
    # lexical_context reads that); below, its lexical parts are scaled by (share / this) ** 2
    # (before lexical_exponent): a request whose best matches share a word with it ("can you
    # recommend cafes in San Francisco?" against "I follow a gluten-free diet") has no lexical
    # evidence worth its weight. 0: off.
    lexical_support: float = Field(default=0.2, ge=0, le=1)
    spread_depth: int = Field(default=1, ge=0, le=4)
    spread_fanout: int = Field(default=8, ge=0, le=100)
    spread_decay: float = Field(default=0.4, ge=0, le=1)
    spread_seeds: int = Field(default=30, ge=0, le=1000)
    # Timeline neighbours spread to each other only when they belong together: the same
    # session, or (when not both have one) event times at most this many minutes apart.
    timeline_window_minutes: float = Field(default=60.0, ge=0)
    # A query of several turns (a chat excerpt): its latest turn's share of the lexical score
    # (the earlier turns have the rest) and of the query vector (see store/search/query_shape.py).
    chat_focus_lexical: float = Field(default=0.9, ge=0, le=1)
    chat_focus_dense: float = Field(default=0.7, ge=0, le=1)
    # ...which is also read as given, a second reading; each memory keeps the better of its
    # match under the two. The reading that is not the chat's subject is weighted by
    # chat_aside: the focus's when the latest turn asks nothing; the excerpt's when it asks a
    # question that leaves the chat's subject (store/search/query_shape.py: `weigh`).
    chat_aside: float = Field(default=0.5, ge=0, le=1)
    # A search whose best hit's relevance (0-1, comparable across queries) is lower answers
    # no hits ("nothing relevant"); 0: always k hits.
    min_score: float = Field(default=0.0, ge=0, le=1)


class ReinforcementSettings(Section):
    flush_seconds: float = Field(default=5.0, gt=0)
    # base_importance grows by this per recall, never beyond +max_boost over its original value.
    importance_step: float = Field(default=0.1, ge=0)
    max_boost: float = Field(default=2.0, ge=0)
    # A hit less relevant than this (its breakdown's relevance, 0-1) is returned but not
    # counted as a recall: a search for something absent must not strengthen what it brought
    # back. The default is the agents' threshold (AGENT_MIN_SCORE); 0 counts every hit.
    min_relevance: float = Field(default=AGENT_MIN_SCORE, ge=0, le=1)


class StoreSettings(Section):
    """Everything the store reads; ``secretary.config.Settings`` adds the daemon's sections."""

    data_dir: Path = Field(default=DEFAULT_DATA_DIR, validate_default=True)
    database: DatabaseSettings = DatabaseSettings()
    index: IndexSettings = IndexSettings()
    lexical: LexicalSettings = LexicalSettings()
    api: ApiSettings = ApiSettings()
    ingest: IngestSettings = IngestSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    reinforcement: ReinforcementSettings = ReinforcementSettings()

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="after")
    def _unique_keys(self) -> StoreSettings:
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

    @property
    def lexical_path(self) -> Path | None:
        """Where the lexical indexes are saved (None: not saved), per database: a directory
        shared by stores of several databases keeps them apart."""
        if not self.lexical.persist:
            return None
        root = (
            Path(self.lexical.path).expanduser() if self.lexical.path else self.data_dir / "lexical"
        )
        return root / _database_key(self.database.url)


def _database_key(url: str) -> str:
    """Name a database by its URL without the password (changing it keeps the indexes)."""
    if not url:
        return "sqlite"  # the data directory's own database
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
        parts = parts._replace(netloc=f"{user}{host}{port}")
    return hashlib.sha256(urlunsplit(parts).encode("utf-8")).hexdigest()[:16]
