"""The audit log: every record of who triggered, paused, cleared, marked, backfilled or
changed a variable or connection (core/audit.py), written once from the outbox; the Raft
state keeps only the newest.

Additive only: a release that does not know it writes what it wrote before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("log_index", sa.BigInteger, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_dag_id_id", "audit_log", ["dag_id", "id"])
    op.create_index("ix_audit_log_actor_id", "audit_log", ["actor", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_actor_id", table_name="audit_log")
    op.drop_index("ix_audit_log_dag_id_id", table_name="audit_log")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
