"""Variables and connections restricted to DAGs: ``secret.dags``.

The DAGs that may read a variable or connection, comma-separated (core/secret_policy.py); ""
for one every DAG may read, which is what every row written before this column means.

Additive only: a release that does not know it writes what it wrote before (the default).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("secret") as batch:
        batch.add_column(sa.Column("dags", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("secret") as batch:
        batch.drop_column("dags")
