"""Variables, connections and callback jobs in the DB; the outbox seq of every upserted row.

- ``secret``: each variable and connection as the Raft state holds it (a Fernet token, never
  a value), and ``callback_job``: each callback job as last changed. Before this revision they
  lived only in the Raft state, so ``cluster rebuild --from-db`` lost them.
- ``outbox_seq`` on ``dags``, ``dag_run`` and ``task_instance``: the seq of the outbox entry
  that last wrote the row (NULL in rows written before this revision), so ``db quarantine
  retry`` can tell an older quarantined entry from a newer row.

Additive only: a release that does not know them writes what it wrote before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_VERSIONED = ("dags", "dag_run", "task_instance")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    for table in _VERSIONED:
        op.add_column(table, sa.Column("outbox_seq", sa.BigInteger, nullable=True))
    op.create_table(
        "secret",
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("key", sa.String(250), nullable=False),
        sa.Column("ciphertext", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=True),
        sa.Column("outbox_seq", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("kind", "key", name="pk_secret"),
    )
    op.create_table(
        "callback_job",
        sa.Column("job_id", sa.String(1100), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("job", sa.JSON, nullable=False),
        sa.Column("outbox_seq", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_callback_job"),
    )
    op.create_index("ix_callback_job_state", "callback_job", ["state"])


def downgrade() -> None:
    op.drop_index("ix_callback_job_state", table_name="callback_job")
    op.drop_table("callback_job")
    op.drop_table("secret")
    for table in _VERSIONED:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("outbox_seq")
