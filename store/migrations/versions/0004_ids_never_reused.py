"""ids never reused: AUTOINCREMENT on SQLite for memories, relations and logs

Without it SQLite hands out the highest rowid again once that row is gone (an undone ingest,
a purge, a forget), so a cached id could name other content and a record's history mix two
memories. Existing stores also start their counters above every id a record names.
PostgreSQL's sequences never go back: nothing to do there. (Records are never deleted once
committed, so their ids need no such care.)

Revision ID: 0004
Revises: 0003
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# table -> the target_kind its rows have in maintenance_operations (None: never a target)
TABLES = {
    'memories': 'memory',
    'memory_relations': 'relation',
    'conversation_logs': None,
}


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != 'sqlite':
        return
    for table in TABLES:
        # Recreated from its reflection (foreign keys are off during migrations, see env.py).
        with op.batch_alter_table(
            table, recreate='always', table_kwargs={'sqlite_autoincrement': True}
        ):
            pass
    for table, kind in TABLES.items():
        highest = connection.execute(sa.text(f'SELECT coalesce(max(id), 0) FROM {table}')).scalar()
        if kind is not None:
            named = connection.execute(
                sa.text(
                    'SELECT coalesce(max(target_id), 0) FROM maintenance_operations'
                    ' WHERE target_kind = :kind'
                ),
                {'kind': kind},
            ).scalar()
            highest = max(highest, named)
        connection.execute(sa.text('DELETE FROM sqlite_sequence WHERE name = :t'), {'t': table})
        connection.execute(
            sa.text('INSERT INTO sqlite_sequence (name, seq) VALUES (:t, :seq)'),
            {'t': table, 'seq': highest},
        )


def downgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != 'sqlite':
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate='always', table_kwargs={'sqlite_autoincrement': False}
        ):
            pass
