"""Asset events: ``asset_event`` and ``asset_event_run`` (docs/architecture.md §21).

Every committed asset event (the replicated state keeps each asset's newest 100), and which
events each asset-triggered run carried. Rows are written once, from ASSET_EVENT and
ASSET_RUN outbox entries. Empty until the cluster runs the release with assets (0.3.0).

Revision ID: 0009
Revises: 0007 (0008, the pools migration, once it lands)
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "asset_event",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("uri", sa.String(1000), nullable=False),
        sa.Column("extra", sa.Text, nullable=False),
        sa.Column("timestamp", TS, nullable=False),
        sa.Column("source_dag_id", sa.String(250), nullable=False),
        sa.Column("source_run_id", sa.String(250), nullable=False),
        sa.Column("source_task_id", sa.String(250), nullable=False),
        sa.Column("source_try", sa.Integer, nullable=False),
        sa.Column("event_key", sa.String(200), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
    )
    op.create_index("ix_asset_event_uri_id", "asset_event", ["uri", "id"])
    op.create_table(
        "asset_event_run",
        sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("dag_id", sa.String(250), primary_key=True),
        sa.Column("run_id", sa.String(250), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("asset_event_run")
    op.drop_index("ix_asset_event_uri_id", table_name="asset_event")
    op.drop_table("asset_event")
