"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22 04:56:37.559752
"""

from alembic import op
import sqlalchemy as sa

from store.models import UTCDateTime


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('conversation_logs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('session_id', sa.String(length=256), nullable=False),
    sa.Column('role', sa.String(length=32), nullable=False),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('timestamp', UTCDateTime(), nullable=False),
    sa.Column('pair_id', sa.String(length=256), nullable=True),
    sa.Column('idempotency_key', sa.String(length=256), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_conversation_logs')),
    sa.UniqueConstraint('namespace', 'idempotency_key', name='uq_logs_namespace_key')
    )
    with op.batch_alter_table('conversation_logs', schema=None) as batch_op:
        batch_op.create_index('ix_logs_session', ['namespace', 'session_id', 'timestamp'], unique=False)

    op.create_table('index_outbox',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('memory_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('action', sa.String(length=8), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_index_outbox'))
    )
    op.create_table('job_state',
    sa.Column('job', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('job', 'namespace', name=op.f('pk_job_state'))
    )
    op.create_table('maintenance_records',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started_at', UTCDateTime(), nullable=False),
    sa.Column('finished_at', UTCDateTime(), nullable=True),
    sa.Column('model', sa.String(length=256), nullable=True),
    sa.Column('prompts', sa.JSON(), nullable=False),
    sa.Column('tokens_in', sa.Integer(), nullable=False),
    sa.Column('tokens_out', sa.Integer(), nullable=False),
    sa.Column('cost', sa.Float(), nullable=True),
    sa.Column('stats', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('undoes_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('undone_by_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.ForeignKeyConstraint(['undoes_id'], ['maintenance_records.id'], name=op.f('fk_maintenance_records_undoes_id_maintenance_records')),
    sa.ForeignKeyConstraint(['undone_by_id'], ['maintenance_records.id'], name=op.f('fk_maintenance_records_undone_by_id_maintenance_records')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_maintenance_records'))
    )
    with op.batch_alter_table('maintenance_records', schema=None) as batch_op:
        batch_op.create_index('ix_records_namespace', ['namespace', 'started_at'], unique=False)

    op.create_table('memories',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('external_id', sa.String(length=256), nullable=True),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('importance', sa.Integer(), nullable=False),
    sa.Column('base_importance', sa.Float(), nullable=False),
    sa.Column('access_count', sa.Integer(), nullable=False),
    sa.Column('last_accessed', UTCDateTime(), nullable=True),
    sa.Column('event_time', UTCDateTime(), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.Column('session_id', sa.String(length=256), nullable=True),
    sa.Column('prev_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('next_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('replaced_by_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('pinned', sa.Boolean(), nullable=False),
    sa.Column('source', sa.String(length=64), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['next_id'], ['memories.id'], name=op.f('fk_memories_next_id_memories'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['prev_id'], ['memories.id'], name=op.f('fk_memories_prev_id_memories'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['replaced_by_id'], ['memories.id'], name=op.f('fk_memories_replaced_by_id_memories'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_memories')),
    sa.UniqueConstraint('namespace', 'external_id', name='uq_memories_namespace_external_id')
    )
    with op.batch_alter_table('memories', schema=None) as batch_op:
        batch_op.create_index('ix_memories_hash', ['namespace', 'content_hash'], unique=False)
        batch_op.create_index('ix_memories_session', ['namespace', 'session_id'], unique=False)
        batch_op.create_index('ix_memories_status', ['namespace', 'status'], unique=False)
        batch_op.create_index('ix_memories_timeline', ['namespace', 'event_time', 'id'], unique=False)

    op.create_table('namespace_state',
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('revision', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('namespace', name=op.f('pk_namespace_state'))
    )
    op.create_table('maintenance_operations',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('record_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=32), nullable=False),
    sa.Column('target_kind', sa.String(length=16), nullable=False),
    sa.Column('target_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('before', sa.JSON(), nullable=True),
    sa.Column('after', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['record_id'], ['maintenance_records.id'], name=op.f('fk_maintenance_operations_record_id_maintenance_records'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_maintenance_operations')),
    sa.UniqueConstraint('record_id', 'seq', name='uq_operations_record_seq')
    )
    with op.batch_alter_table('maintenance_operations', schema=None) as batch_op:
        batch_op.create_index('ix_operations_target', ['target_kind', 'target_id'], unique=False)

    op.create_table('memory_relations',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('namespace', sa.String(length=128), nullable=False),
    sa.Column('source_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('target_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('strength', sa.Float(), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['source_id'], ['memories.id'], name=op.f('fk_memory_relations_source_id_memories'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['target_id'], ['memories.id'], name=op.f('fk_memory_relations_target_id_memories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_memory_relations')),
    sa.UniqueConstraint('source_id', 'target_id', 'type', name='uq_relations_edge')
    )
    with op.batch_alter_table('memory_relations', schema=None) as batch_op:
        batch_op.create_index('ix_relations_source', ['source_id'], unique=False)
        batch_op.create_index('ix_relations_target', ['target_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('memory_relations', schema=None) as batch_op:
        batch_op.drop_index('ix_relations_target')
        batch_op.drop_index('ix_relations_source')

    op.drop_table('memory_relations')
    with op.batch_alter_table('maintenance_operations', schema=None) as batch_op:
        batch_op.drop_index('ix_operations_target')

    op.drop_table('maintenance_operations')
    op.drop_table('namespace_state')
    with op.batch_alter_table('memories', schema=None) as batch_op:
        batch_op.drop_index('ix_memories_timeline')
        batch_op.drop_index('ix_memories_status')
        batch_op.drop_index('ix_memories_session')
        batch_op.drop_index('ix_memories_hash')

    op.drop_table('memories')
    with op.batch_alter_table('maintenance_records', schema=None) as batch_op:
        batch_op.drop_index('ix_records_namespace')

    op.drop_table('maintenance_records')
    op.drop_table('job_state')
    op.drop_table('index_outbox')
    with op.batch_alter_table('conversation_logs', schema=None) as batch_op:
        batch_op.drop_index('ix_logs_session')

    op.drop_table('conversation_logs')

