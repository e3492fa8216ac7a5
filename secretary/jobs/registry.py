"""The job registry: every maintenance job by name, in the order a cycle runs them.

The schedule settings (one cron expression per job), `secretary dream --job` and
`secretary schedule` all derive their lists from ``JOBS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from secretary.jobs.auditor import Auditor
from secretary.jobs.base import Job
from secretary.jobs.consolidator import Consolidator
from secretary.jobs.extractor import Extractor
from secretary.jobs.linker import Linker
from secretary.jobs.retention import Retention
from secretary.jobs.soul_mapper import SoulMapper
from store.errors import SecretaryError

# New memories first, then links, audit, traits, summaries, and finally the purge.
JOBS: Mapping[str, Job] = {
    job.name: job
    for job in (Extractor(), Linker(), Auditor(), SoulMapper(), Consolidator(), Retention())
}
JOB_NAMES = tuple(JOBS)


class UnknownJob(SecretaryError):
    exit_code = 2

    def __init__(self, name: str, known: Iterable[str] = JOB_NAMES) -> None:
        super().__init__(f"unknown job {name!r}; known jobs: {', '.join(known)}")


def get_job(name: str) -> Job:
    """Return the registered job. Raise UnknownJob if there is none by that name."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJob(name) from None
