"""ix_memories_replaced_by: find the memories a memory replaced (search scores a replacement in
their sessions too; deleting a memory checks who points at it)

Revision ID: 0007
Revises: 0006
"""

from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_memories_replaced_by', 'memories', ['replaced_by_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_memories_replaced_by', table_name='memories')
