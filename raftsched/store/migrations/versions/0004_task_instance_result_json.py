"""XCom return values: ``task_instance.result_json``.

A SUCCESS attempt's return value (JSON text, at most 64 KiB: ``core/xcom.py``) is written with
the attempt's row, so the task page and `tasks show` read it from the DB; NULL when the
attempt returned nothing (and in every row written before this revision).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_instance", sa.Column("result_json", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("result_json")
