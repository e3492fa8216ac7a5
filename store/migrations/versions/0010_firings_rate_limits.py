"""firings, firing_units, rate_limits, rate_events: a night's work shared by several daemons,
and one rate limit for the model across them

Revision ID: 0010
Revises: 0009
"""

from alembic import op
import sqlalchemy as sa

from store.models import Id, UTCDateTime


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('firings',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('key', sa.String(length=256), nullable=False),
    sa.Column('jobs', sa.JSON(), nullable=False),
    sa.Column('manual', sa.Boolean(), nullable=False),
    sa.Column('retry_quarantined', sa.Boolean(), nullable=False),
    sa.Column('opened_by', sa.String(length=256), nullable=False),
    sa.Column('opened_at', UTCDateTime(), nullable=False),
    sa.Column('finished_at', UTCDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_firings')),
    sa.UniqueConstraint('key', name=op.f('uq_firings_key'))
    )
    op.create_index('ix_firings_open', 'firings', ['finished_at', 'id'], unique=False)
    op.create_table('firing_units',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('firing_id', Id, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('holder', sa.String(length=256), nullable=True),
    sa.Column('lease_until', UTCDateTime(), nullable=True),
    sa.Column('claims', sa.Integer(), nullable=False),
    sa.Column('started_at', UTCDateTime(), nullable=True),
    sa.Column('finished_at', UTCDateTime(), nullable=True),
    sa.Column('outcomes', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(
        ['firing_id'], ['firings.id'],
        name=op.f('fk_firing_units_firing_id_firings'), ondelete='CASCADE'
    ),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_firing_units')),
    sa.UniqueConstraint('firing_id', 'namespace', name=op.f('uq_firing_units_firing_id'))
    )
    op.create_index(
        'ix_firing_units_claim', 'firing_units', ['state', 'firing_id', 'position'], unique=False
    )
    op.create_index(
        'ix_firing_units_namespace', 'firing_units', ['namespace', 'state'], unique=False
    )
    op.create_table('rate_limits',
    sa.Column('scope', sa.String(length=128), nullable=False),
    sa.Column('paused_until', UTCDateTime(), nullable=True),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('scope', name=op.f('pk_rate_limits'))
    )
    op.create_table('rate_events',
    sa.Column('id', Id, autoincrement=True, nullable=False),
    sa.Column('scope', sa.String(length=128), nullable=False),
    sa.Column('at', UTCDateTime(), nullable=False),
    sa.Column('tokens', sa.Integer(), nullable=False),
    sa.Column('holder', sa.String(length=256), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rate_events'))
    )
    op.create_index('ix_rate_events_scope_at', 'rate_events', ['scope', 'at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_rate_events_scope_at', table_name='rate_events')
    op.drop_table('rate_events')
    op.drop_table('rate_limits')
    op.drop_index('ix_firing_units_namespace', table_name='firing_units')
    op.drop_index('ix_firing_units_claim', table_name='firing_units')
    op.drop_table('firing_units')
    op.drop_index('ix_firings_open', table_name='firings')
    op.drop_table('firings')
