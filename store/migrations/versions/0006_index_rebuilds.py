"""index_rebuilds: a vector index rebuild that has not finished, so that it is resumed and
searches can say the index is incomplete

Revision ID: 0006
Revises: 0005
"""

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('index_rebuilds',
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('after_id', sa.BigInteger(), nullable=False),
    sa.Column('copied', sa.BigInteger(), nullable=False),
    sa.Column('total', sa.BigInteger(), nullable=False),
    sa.Column('requested_at', UTCDateTime(), nullable=False),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('namespace', name=op.f('pk_index_rebuilds'))
    )


def downgrade() -> None:
    op.drop_table('index_rebuilds')
