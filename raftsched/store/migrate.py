"""Schema migrations, run in code: upgrade to head, and check whether a database is at head.

Alembic's config is built here (``script_location`` = the ``migrations`` package directory),
so no alembic.ini is needed anywhere. Upgrades run in one write transaction (both databases
have transactional DDL) under a lock, so nodes that start together cannot migrate twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from raftsched.errors import MigrationRequired
from raftsched.store.engine import translate_errors, write_transaction

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_MIGRATION_LOCK = 0x72616674_0001  # pg_advisory_xact_lock key, "raft" + 1


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None  # None: an empty database
    head: str

    @property
    def at_head(self) -> bool:
        return self.current == self.head


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations found"  # a packaging bug, not a user error
    return head


def schema_status(engine: Engine) -> SchemaStatus:
    """Where the database stands. Raises StoreUnavailable when it cannot be reached."""
    with translate_errors(engine), engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return SchemaStatus(current=current, head=head_revision())


def init_db(engine: Engine) -> SchemaStatus:
    """Upgrade the database to head (a no-op at head); return the status before the upgrade."""
    before = _migrate(engine, lambda config, _before: command.upgrade(config, "head"))
    return SchemaStatus(current=before, head=head_revision())


def downgrade_db(engine: Engine, revision: str) -> SchemaStatus:
    """Take the database back to ``revision`` (a rollback to an older release, before the
    upgrade was finalized: README, Upgrading); return the status before. Only a revision
    older than the current one; nothing happens at ``revision`` itself."""

    def downgrade(config: Config, before: str | None) -> None:
        if before != revision:
            command.downgrade(config, revision)

    before = _migrate(engine, downgrade)
    return SchemaStatus(current=before, head=revision)


def _migrate(engine: Engine, step: Callable[[Config, str | None], None]) -> str | None:
    """Run ``step`` in one transaction under the migration lock; return the revision before."""
    config = alembic_config()
    with write_transaction(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
        before = MigrationContext.configure(conn).get_current_revision()
        config.attributes["connection"] = conn
        step(config, before)
    return before


def require_head(engine: Engine) -> SchemaStatus:
    """Raise MigrationRequired unless the database is at head (processes call this at start)."""
    status = schema_status(engine)
    if status.at_head:
        return status
    known = {
        script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()
    }
    if status.current is not None and status.current not in known:
        raise MigrationRequired(
            f"database at revision {status.current}, which this raftsched release does not know"
            f" (its head is {status.head}): upgrade raftsched",
            current=status.current,
            head=status.head,
        )
    current = status.current or "<empty>"
    raise MigrationRequired(
        f"database at revision {current}, head is {status.head}: run raftsched db migrate",
        current=status.current,
        head=status.head,
    )
