"""runs: longer lease names (one lease per job run), finished firings, the jobs' health,
dream requests, and retired memories taken out of the timeline

Revision ID: 0003
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('daemon_leases', schema=None) as batch_op:
        batch_op.alter_column('name', existing_type=sa.String(length=64), type_=sa.String(length=256))
    with op.batch_alter_table('schedule_entries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_finished_at', UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('next_fire_at', UTCDateTime(), nullable=True))
    with op.batch_alter_table('job_state', schema=None) as batch_op:
        batch_op.add_column(sa.Column('health', sa.JSON(), nullable=False, server_default='{}'))
    with op.batch_alter_table('job_state', schema=None) as batch_op:
        batch_op.alter_column('health', existing_type=sa.JSON(), server_default=None)
    op.create_table('dream_requests',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=True),
    sa.Column('jobs', sa.JSON(), nullable=False),
    sa.Column('retry_quarantined', sa.Boolean(), nullable=False),
    sa.Column('requested_by', sa.String(length=256), nullable=False),
    sa.Column('requested_at', UTCDateTime(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('picked_by', sa.String(length=256), nullable=True),
    sa.Column('started_at', UTCDateTime(), nullable=True),
    sa.Column('finished_at', UTCDateTime(), nullable=True),
    sa.Column('outcomes', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dream_requests'))
    )
    with op.batch_alter_table('dream_requests', schema=None) as batch_op:
        batch_op.create_index('ix_dream_requests_status', ['status', 'id'], unique=False)
    _retired_off_the_timeline()


def _retired_off_the_timeline() -> None:
    """Splice every memory that is not active out of the prev/next chain, joining neighbours.

    Before this revision only merged memories left the timeline; from now on every retired
    one does (superseded, archived too), so existing stores are brought into line once.
    """
    connection = op.get_bind()
    memories = sa.table(
        'memories',
        sa.column('id', sa.Integer),
        sa.column('prev_id', sa.Integer),
        sa.column('next_id', sa.Integer),
        sa.column('status', sa.String),
    )
    retired = connection.execute(
        sa.select(memories.c.id)
        .where(
            memories.c.status != 'active',
            sa.or_(memories.c.prev_id.is_not(None), memories.c.next_id.is_not(None)),
        )
        .order_by(memories.c.id)
    ).scalars().all()
    for memory_id in retired:
        prev_id, next_id = connection.execute(
            sa.select(memories.c.prev_id, memories.c.next_id).where(memories.c.id == memory_id)
        ).one()
        if prev_id is not None:
            connection.execute(
                memories.update().where(memories.c.id == prev_id).values(next_id=next_id)
            )
        if next_id is not None:
            connection.execute(
                memories.update().where(memories.c.id == next_id).values(prev_id=prev_id)
            )
        connection.execute(
            memories.update().where(memories.c.id == memory_id).values(prev_id=None, next_id=None)
        )


def downgrade() -> None:
    with op.batch_alter_table('dream_requests', schema=None) as batch_op:
        batch_op.drop_index('ix_dream_requests_status')
    op.drop_table('dream_requests')
    with op.batch_alter_table('job_state', schema=None) as batch_op:
        batch_op.drop_column('health')
    with op.batch_alter_table('schedule_entries', schema=None) as batch_op:
        batch_op.drop_column('next_fire_at')
        batch_op.drop_column('last_finished_at')
    with op.batch_alter_table('daemon_leases', schema=None) as batch_op:
        batch_op.alter_column('name', existing_type=sa.String(length=256), type_=sa.String(length=64))
