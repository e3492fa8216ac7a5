"""rewritten: a namespace counter that grows when a memory's text changes or a row goes, so
that an index built from the texts (the lexical cache) rebuilds instead of extending

Revision ID: 0005
Revises: 0004
"""

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('namespace_state', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('rewritten', sa.BigInteger(), nullable=False, server_default='0')
        )
    with op.batch_alter_table('namespace_state', schema=None) as batch_op:
        batch_op.alter_column('rewritten', existing_type=sa.BigInteger(), server_default=None)


def downgrade() -> None:
    with op.batch_alter_table('namespace_state', schema=None) as batch_op:
        batch_op.drop_column('rewritten')
