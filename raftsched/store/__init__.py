"""raftsched.store: the metadata database (SQLite or PostgreSQL), the cluster's durable history.

Modules, one concept each:

- ``tables``        SQLAlchemy Core tables and the aware-UTC ``UTCDateTime`` type
- ``engine``        ``create_engine_for(url)``, write transactions, DB errors -> raftsched errors
- ``migrate``       Alembic in code: ``init_db`` (upgrade to head), ``require_head``;
  ``migrations/`` the Alembic revisions
- ``abc``           ``OutboxSink``: the contract of writing outbox entries exactly once
- ``materializer``  ``Materializer(engine)``: outbox -> DB, exactly once (docs/architecture.md §5)
- ``upsert``, ``bulk``  dialect-specific upserts; PostgreSQL's one-statement bulk writes
- ``quarantine``, ``quarantine_retry``  entries the DB refused, parked, and written again
- ``memory``        ``MemoryMaterializer``: the same contract in memory, for fast tests
- ``heartbeats``    scheduler nodes' heartbeat rows
- ``queries``       read-only history queries for the API layer
- ``asset_rows``, ``audit_log``  asset events and the audit log's history
- ``rebuild``, ``rebuild_extras``, ``rebuild_assets``  the replicated state rebuilt from the DB
  (``raftsched cluster rebuild --from-db``)
- ``users``         users with salted password hashes and roles
"""
