"""console_sessions: the console's logins, so that logout ends a session and a restart does not

Revision ID: 0009
Revises: 0008
"""

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('console_sessions',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('key_id', sa.String(length=64), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('expires_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_console_sessions'))
    )
    op.create_index(
        op.f('ix_console_sessions_expires_at'), 'console_sessions', ['expires_at'], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f('ix_console_sessions_expires_at'), table_name='console_sessions')
    op.drop_table('console_sessions')
