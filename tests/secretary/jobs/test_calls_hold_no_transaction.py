"""While a job waits on the model, it holds no transaction: on PostgreSQL no connection of the
store sits "idle in transaction", on SQLite another process can take the write lock at once.
A night of many namespaces overlaps its model calls; this is what keeps them off the database.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from sqlalchemy import text

from secretary.cycle import run_cycle
from tests.helpers.openai_server import CHAT_COMPLETIONS, ReceivedRequest
from tests.helpers.scripted_model import ScriptedModel, schema_name
from tests.secretary.jobs.conftest import NOW, NS, World

ONE_HOUR = timedelta(hours=1)


class Checking:
    """The scripted model, looking at the database during every call."""

    def __init__(self, world: World) -> None:
        self._model = ScriptedModel()
        self._world = world
        self.seen: list[tuple[str, int]] = []  # (the reply's schema, transactions open)

    def __call__(self, request: ReceivedRequest) -> object:
        self.seen.append((schema_name(request), self._open_transactions()))
        return self._model(request)

    def _open_transactions(self) -> int:
        engine = self._world.store.engine
        if engine.dialect.name == "postgresql":
            with engine.connect() as connection:
                return int(
                    connection.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                            " current_database() AND state LIKE 'idle in transaction%'"
                        )
                    ).scalar_one()
                )
        path = engine.url.database
        assert path is not None
        connection = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")  # fails at once if a writer holds the lock
            connection.execute("ROLLBACK")
            return 0
        except sqlite3.OperationalError:
            return 1
        finally:
            connection.close()


def test_no_transaction_is_open_while_a_job_waits_on_the_model(world: World) -> None:
    checking = Checking(world)
    world.server.set_default(CHAT_COMPLETIONS, checking)  # type: ignore[arg-type]
    world.logs(
        [
            ("user", "I always drink green tea in the morning.", NOW - 3 * ONE_HOUR),
            ("user", "I went hiking with Tom in the Alps.", NOW - 2 * ONE_HOUR),
            ("user", "We hiked again with Tom the next day.", NOW - ONE_HOUR),
        ]
    )
    world.add(
        [
            {"content": "The user lives in Paris.", "type": "fact"},
            {"content": "The user lives in Lyon now.", "type": "fact"},
        ]
    )

    outcomes = run_cycle(world.store, world.settings, now=NOW, namespaces=[NS])

    assert {o.status for o in outcomes} <= {"applied", "nothing", "skipped"}, outcomes
    asked = {name for name, _ in checking.seen}
    assert "ExtractorReply" in asked
    assert len(asked) >= 3  # several jobs asked the model
    assert [open_ for _, open_ in checking.seen] == [0] * len(checking.seen)
