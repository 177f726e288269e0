"""raftsched.store: the metadata database (SQLite or PostgreSQL), the cluster's durable history.

Modules, one concept each:

- ``tables``        SQLAlchemy Core tables and the aware-UTC ``UTCDateTime`` type
- ``engine``        ``create_engine_for(url)``, write transactions, DB errors -> raftsched errors
- ``migrate``       Alembic in code: ``init_db`` (upgrade to head), ``require_head``
- ``abc``           ``OutboxSink``: the contract of writing outbox entries exactly once
- ``materializer``  ``Materializer(engine)``: outbox -> DB, exactly once (docs/architecture.md §5)
- ``memory``        ``MemoryMaterializer``: the same contract in memory, for fast tests
- ``heartbeats``    scheduler nodes' heartbeat rows
- ``queries``       read-only history queries for the API layer
- ``users``         users with salted password hashes and roles
"""
