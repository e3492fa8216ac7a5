"""ix_memories_versions: every memory's id, version and status, read without the rows (the
lexical index is compared with them after writes it did not see)

Revision ID: 0008
Revises: 0007
"""

from alembic import op


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        'ix_memories_versions', 'memories', ['namespace', 'id', 'version', 'status'], unique=False
    )


def downgrade() -> None:
    op.drop_index('ix_memories_versions', table_name='memories')
