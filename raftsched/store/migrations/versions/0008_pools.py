"""Pools: ``pool``.

One row per pool an operator set (core/pool_table.py): its slots, description and when it was
last changed, written through the outbox (POOL entries) and read back by ``cluster rebuild
--from-db``. Empty until the cluster runs the release with pools (0.3.0, cluster version 3).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool",
        sa.Column("name", sa.String(250), primary_key=True),
        sa.Column("slots", sa.BigInteger, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outbox_seq", sa.BigInteger, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("pool")
