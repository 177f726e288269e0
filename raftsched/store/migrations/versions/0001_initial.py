"""Initial schema: DAGs, runs, task attempts, logs, import errors, heartbeats, users, watermark.

Revision ID: 0001
Revises:
Create Date: 2024-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _key(name: str, length: int = 250) -> sa.Column:
    return sa.Column(name, sa.String(length), nullable=False)


def upgrade() -> None:
    op.create_table(
        "dags",
        _key("dag_id"),
        sa.Column("fileloc", sa.Text, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("dag_id", name="pk_dags"),
    )
    op.create_table(
        "dag_run",
        _key("dag_id"),
        _key("run_id"),
        sa.Column("logical_date", TS, nullable=False),
        sa.Column("data_interval_start", TS, nullable=False),
        sa.Column("data_interval_end", TS, nullable=False),
        sa.Column("run_type", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("conf", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=True),
        sa.Column("start_date", TS, nullable=True),
        sa.Column("end_date", TS, nullable=True),
        sa.PrimaryKeyConstraint("dag_id", "run_id", name="pk_dag_run"),
        sa.UniqueConstraint("dag_id", "logical_date", name="uq_dag_run_dag_id_logical_date"),
    )
    op.create_index("ix_dag_run_state", "dag_run", ["state"])
    op.create_table(
        "task_instance",
        _key("dag_id"),
        _key("run_id"),
        _key("task_id"),
        sa.Column("try_number", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("worker_id", sa.String(250), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=True),
        sa.Column("queued_at", TS, nullable=True),
        sa.Column("start_date", TS, nullable=True),
        sa.Column("end_date", TS, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint(
            "dag_id", "run_id", "task_id", "try_number", name="pk_task_instance"
        ),
    )
    op.create_index("ix_task_instance_state", "task_instance", ["state"])
    op.create_table(
        "task_log",
        _key("dag_id"),
        _key("run_id"),
        _key("task_id"),
        sa.Column("try_number", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("chunk_seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("stream", sa.String(10), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint(
            "dag_id", "run_id", "task_id", "try_number", "chunk_seq", name="pk_task_log"
        ),
    )
    op.create_table(
        "import_error",
        _key("fileloc", 1024),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("traceback", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("fileloc", name="pk_import_error"),
    )
    op.create_table(
        "node_heartbeat",
        _key("node_id"),
        sa.Column("address", sa.String(250), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("term", sa.BigInteger, nullable=False),
        sa.Column("commit_index", sa.BigInteger, nullable=False),
        sa.Column("applied_index", sa.BigInteger, nullable=False),
        sa.Column("last_leader_contact", TS, nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("extra", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("node_id", name="pk_node_heartbeat"),
    )
    op.create_table(
        "users",
        _key("username"),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("username", name="pk_users"),
    )
    watermark = op.create_table(
        "materialize_watermark",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_materialize_watermark"),
        sa.CheckConstraint("id = 1", name="ck_materialize_watermark_single_row"),
    )
    op.bulk_insert(watermark, [{"id": 1, "seq": 0, "updated_at": None}])


def downgrade() -> None:
    for table in (
        "materialize_watermark",
        "users",
        "node_heartbeat",
        "import_error",
        "task_log",
        "task_instance",
        "dag_run",
        "dags",
    ):
        op.drop_table(table)
