"""Alembic environment: runs on the connection that ``raftsched.store.migrate`` hands over.

There is no alembic.ini and no offline (SQL script) mode: ``raftsched db migrate`` builds the
Alembic config in code and passes an open connection inside a write transaction.
"""

from __future__ import annotations

from alembic import context

from raftsched.store.tables import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError(
        "run raftsched migrations with `raftsched db migrate` (raftsched.store.migrate),"
        " not the alembic command"
    )

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters by table copy
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
