"""Outbox quarantine: entries the database refused, kept with its error (issue #9).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox_quarantine",
        sa.Column("seq", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_outbox_quarantine"),
    )


def downgrade() -> None:
    op.drop_table("outbox_quarantine")
