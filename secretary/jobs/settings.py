"""The ``[jobs]`` and ``[guardrails]`` settings sections: how the maintenance jobs work, and
limits on what one run may change."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from store.settings import Section


class JobsSettings(Section):
    """How the maintenance jobs work. Keys are flat (``linker_threshold``, not a sub-table) so
    that every one can be overridden from the environment, e.g. SECRETARY_JOBS_BATCH_SIZE.
    """

    # "off": plans apply at once. "changes": plans that change existing memories (merge,
    # supersede, archive, purge) wait for `secretary plans approve`; additions apply at once.
    # "all": every plan waits.
    approval: Literal["off", "changes", "all"] = "off"
    # New items one LLM call is about at most: log lines, new memories, or for the linker
    # groups (a new memory with its neighbours). The older memories the linker and auditor
    # compare them with come along, each sent once per call. Larger calls spend fewer tokens
    # on what every call repeats (instructions, shared neighbours, the soul mapper's traits),
    # but replies grow with them and must fit in [llm] max_reply_tokens: 45 log lines' memories
    # do even at about 90 tokens per memory, one for every line.
    batch_size: int = Field(default=45, ge=1, le=500)
    # Most LLM calls one job run makes; what is left waits for the next run.
    max_llm_calls_per_run: int = Field(default=10, ge=1, le=1000)
    # Most new items (log lines, memories) one job run reads.
    max_items_per_run: int = Field(default=500, ge=1, le=100_000)
    # After a failed run the job waits before it runs again on that namespace: this many
    # minutes, doubling with each failure in a row, at most failure_backoff_max_minutes (and at
    # least what a provider's Retry-After asks for). A call that fails in quarantine_after runs
    # in a row is quarantined: its items are left out until `secretary dream
    # --retry-quarantined`, and the job moves on.
    failure_backoff_minutes: float = Field(default=5.0, ge=0)
    failure_backoff_max_minutes: float = Field(default=1440.0, ge=0)
    quarantine_after: int = Field(default=3, ge=1, le=100)
    # Runs at once on different namespaces (a daemon's, and `secretary dream`'s): the model's
    # latency, not the host, bounds a night, so runs overlap their calls. One namespace runs one
    # job at a time, its jobs in order. On SQLite the short writes queue for its one writer.
    concurrency: int = Field(default=8, ge=1, le=256)
    # One run per job and namespace at a time, across processes and hosts: a run holds a lease
    # in the database for this long, renewed every third of it while the run runs (a run whose
    # process was killed frees its namespace after at most this).
    run_lock_seconds: float = Field(default=120.0, ge=10)
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
    # auditor: identical text of the same type is an exact duplicate, merged with no model: for
    # facts and preferences always; for events, summaries and tool experiences when both are of
    # one session, or neither has one and they are at most this many minutes apart. A run
    # merges them all, max_items_per_run memories read at a time, recalled or not (the copy's
    # recalls go to its keeper); a pinned copy is never merged away.
    auditor_duplicate_window_minutes: float = Field(default=60.0, ge=0)
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


class GuardrailSettings(Section):
    """Limits on what one job run may change, checked before anything is written."""

    # Protected memories are never merged, superseded, archived or rewritten by a job: pinned
    # ones, those with importance >= protect_importance (11 = none) and those recalled in the
    # last protect_accessed_days days (0 = none), unless allow_protected_changes is on. An exact
    # duplicate's merge is held back by a pinned memory only (secretary.jobs.guardrails).
    protect_importance: int = Field(default=9, ge=1, le=11)
    protect_accessed_days: float = Field(default=7.0, ge=0)
    allow_protected_changes: bool = False
    # A plan changing more existing memories than max_changes_per_run (0 = no limit), or more
    # than max_change_share of the namespace's active memories (once it changes more than
    # change_share_floor), is refused and recorded; nothing of it is applied. Merges of exact
    # duplicates are not counted: they go in records of at most max_changes_per_run each.
    max_changes_per_run: int = Field(default=200, ge=0)
    max_change_share: float = Field(default=0.25, gt=0, le=1)
    change_share_floor: int = Field(default=20, ge=0)
