"""What the store's status and metrics need to know from the secretary: the jobs and the budget.

``store.status`` cannot import the jobs or the LLM settings; the serve and run commands (and
`secretary status`) hand it this ``StatusConfig``: each registered job in running order with
what it reads past which watermarks, and the daily token budget per namespace.
"""

from __future__ import annotations

from secretary.config import Settings
from secretary.jobs.base import WatermarkJob
from secretary.jobs.consolidator import FRAGMENT_TYPE, Consolidator
from secretary.jobs.extractor import Extractor
from secretary.jobs.registry import JOBS
from secretary.jobs.soul_mapper import EVIDENCE_TYPES, SoulMapper
from store.status import JobReads, StatusConfig

# Jobs whose reads are not every active memory: the extractor reads conversation logs, the
# consolidator only event fragments, the soul mapper only events and facts.
_TYPES = {Consolidator.name: (FRAGMENT_TYPE,), SoulMapper.name: tuple(EVIDENCE_TYPES)}


def status_config(settings: Settings) -> StatusConfig:
    """Given the settings, return what the store's status needs (see the module docstring)."""
    jobs: dict[str, JobReads | None] = {}
    for name, job in JOBS.items():
        if not isinstance(job, WatermarkJob):
            jobs[name] = None  # retention purges by age and reads no backlog
            continue
        marks = (job.deterministic_watermark, job.llm_watermark)
        jobs[name] = JobReads(
            source="logs" if name == Extractor.name else "memories",
            watermarks=tuple(dict.fromkeys(mark for mark in marks if mark is not None)),
            types=_TYPES.get(name),
        )
    return StatusConfig(max_tokens_per_day=settings.llm.max_tokens_per_day, jobs=jobs)
