"""Skipped schedule slots: ``skipped_slots``.

One row per range of consecutive slots a schedule policy skipped (core/slot_policy.py), keyed
by the DAG and the range's last slot (the schedule passes it once). The replicated state keeps
only each DAG's newest ranges; ``dags explain`` reads older ones here. Empty until the cluster
runs the release that skips slots.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "skipped_slots",
        sa.Column("dag_id", sa.String(250), primary_key=True),
        sa.Column("last_slot", TS, primary_key=True),
        sa.Column("first_slot", TS, nullable=False),
        sa.Column("slots", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("decided_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("skipped_slots")
