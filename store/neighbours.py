"""When two memories next to each other on the timeline belong together.

Retrieval spreads activation between such neighbours; a supersede relates the replacement to
the old memory's (see ``InheritRelations.context``). Pure values, no I/O.
"""

from __future__ import annotations

from datetime import datetime

# The timeline neighbours of a memory are as associated as the strongest relation.
TIMELINE_WEIGHT = 1.0


def together(
    session: str | None,
    moment: datetime,
    other_session: str | None,
    other_moment: datetime,
    window_minutes: float,
) -> bool:
    """Return whether two timeline neighbours belong together, so that activation may pass.

    Two memories of sessions belong together when it is the same session (a session
    boundary stops spreading, however close in time); otherwise when their event times are
    at most ``window_minutes`` apart: consecutive events of a diary kept over years are
    unrelated, events written from one conversation are minutes apart.
    """
    if session is not None and other_session is not None:
        return session == other_session
    return abs((moment - other_moment).total_seconds()) <= window_minutes * 60.0
