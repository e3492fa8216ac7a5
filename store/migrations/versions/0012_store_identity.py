"""store_identity: the store's own id, made once, which every Chroma collection of the store
carries: a second store pointed at the same Chroma server is refused there instead of
overwriting the first one's vectors of the same memory ids

Revision ID: 0012
Revises: 0011
"""

import uuid
from datetime import UTC, datetime

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table('store_identity',
    sa.Column('name', sa.String(length=16), nullable=False),
    sa.Column('store_id', sa.String(length=32), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_store_identity'))
    )
    op.bulk_insert(
        table, [{'name': 'store', 'store_id': uuid.uuid4().hex, 'created_at': datetime.now(UTC)}]
    )


def downgrade() -> None:
    op.drop_table('store_identity')
