"""daemon lease and schedule overrides

Revision ID: 0002
Revises: 0001
"""

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('daemon_leases',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('holder', sa.String(length=256), nullable=False),
    sa.Column('acquired_at', UTCDateTime(), nullable=False),
    sa.Column('expires_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_daemon_leases'))
    )
    op.create_table('schedule_entries',
    sa.Column('job', sa.String(length=64), nullable=False),
    sa.Column('cron', sa.String(length=128), nullable=True),
    sa.Column('paused', sa.Boolean(), nullable=False),
    sa.Column('last_fired_at', UTCDateTime(), nullable=True),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('job', name=op.f('pk_schedule_entries'))
    )


def downgrade() -> None:
    op.drop_table('schedule_entries')
    op.drop_table('daemon_leases')
