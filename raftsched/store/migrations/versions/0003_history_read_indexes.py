"""Indexes for the history reads: runs of all DAGs newest first, and runs by state.

``ListRuns`` without a DAG orders every run by (logical_date DESC, dag_id, run_id): without
an index in that order PostgreSQL read and sorted the whole ``dag_run`` table for each page
(scripts/bench/db_explain.py: 48 ms and a 200,000-row sort at 200,000 runs). The state index
gets the same order after ``state``, so a page of one state is a range of it instead of a sort
of every run in that state; it serves the old ``state`` lookups too, so it replaces
``ix_dag_run_state``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ORDER = [sa.text("logical_date DESC"), "dag_id", "run_id"]  # ListRuns' order


def upgrade() -> None:
    op.create_index("ix_dag_run_logical_date", "dag_run", _ORDER)
    op.create_index("ix_dag_run_state_logical_date", "dag_run", ["state", *_ORDER])
    op.drop_index("ix_dag_run_state", table_name="dag_run")


def downgrade() -> None:
    op.create_index("ix_dag_run_state", "dag_run", ["state"])
    op.drop_index("ix_dag_run_state_logical_date", table_name="dag_run")
    op.drop_index("ix_dag_run_logical_date", table_name="dag_run")
