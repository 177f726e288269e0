"""Alembic migrations of the metadata database; run them through ``raftsched.store.migrate``."""
