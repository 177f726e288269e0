"""The metadata database's tables (SQLAlchemy Core), shared by SQLite and PostgreSQL.

The schema itself is created and changed only by the Alembic migrations in
``store/migrations``; these definitions are what the code reads and writes, and a test checks
that the migrations at head produce exactly them.

No foreign keys between the history tables, on purpose: the Raft outbox is the source of
truth and the materializer must never get stuck on an ordering detail (say a log chunk whose
attempt row lands in a later batch). Uniqueness is enforced where an invariant needs it:
one run per (dag_id, logical_date) and per (dag_id, run_id), one row per task attempt, one
row per log chunk.

Every timestamp is a :class:`UTCDateTime`: an aware datetime goes in, an aware UTC datetime
comes out, on both databases.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

# The seq of the outbox entry that last wrote a row (migration 0005; NULL in rows written
# before it): the row's version. ``db quarantine retry`` compares it with a quarantined
# entry's seq so an older entry never silently overwrites a newer row.
OUTBOX_SEQ = "outbox_seq"

# Names of constraints and indexes, so migrations can refer to them on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that only accepts aware datetimes and returns aware UTC.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so the value is stored as
    naive UTC text and made aware again on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: raftsched stores aware UTC datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


dags = sa.Table(
    "dags",
    metadata,
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("fileloc", sa.Text, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),  # DagSpec.to_dict()
    sa.Column("spec_hash", sa.String(64), nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False, default=False),
    sa.Column("active", sa.Boolean, nullable=False, default=True),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),  # see OUTBOX_SEQ below
)

dag_run = sa.Table(
    "dag_run",
    metadata,
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("logical_date", UTCDateTime, nullable=False),
    sa.Column("data_interval_start", UTCDateTime, nullable=False),
    sa.Column("data_interval_end", UTCDateTime, nullable=False),
    sa.Column("run_type", sa.String(20), nullable=False),  # RunType
    sa.Column("state", sa.String(20), nullable=False),  # RunState
    sa.Column("conf", sa.JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=True),
    sa.Column("start_date", UTCDateTime, nullable=True),
    sa.Column("end_date", UTCDateTime, nullable=True),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),
    # Invariant 1: one run per schedule slot. Also serves "runs of a DAG, newest first".
    sa.UniqueConstraint("dag_id", "logical_date"),
)
# ListRuns' order, (logical_date DESC, dag_id, run_id): a page of every DAG's runs, or of one
# state's, is a range of an index, not a sort of the table (migration 0003). Runs of one DAG
# go through uq_dag_run_dag_id_logical_date.
sa.Index(
    "ix_dag_run_logical_date", dag_run.c.logical_date.desc(), dag_run.c.dag_id, dag_run.c.run_id
)
sa.Index(
    "ix_dag_run_state_logical_date",
    dag_run.c.state,
    dag_run.c.logical_date.desc(),
    dag_run.c.dag_id,
    dag_run.c.run_id,
)

task_instance = sa.Table(
    "task_instance",
    metadata,
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("task_id", sa.String(250), primary_key=True),
    sa.Column("try_number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("state", sa.String(20), nullable=False),  # TaskState
    sa.Column("worker_id", sa.String(250), nullable=True),
    sa.Column("lease_token", sa.BigInteger, nullable=True),  # fencing token of the lease
    sa.Column("queued_at", UTCDateTime, nullable=True),
    sa.Column("start_date", UTCDateTime, nullable=True),
    sa.Column("end_date", UTCDateTime, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("message", sa.Text, nullable=False, default=""),
    # A SUCCESS attempt's return value (XCom) as JSON text; NULL: none (migration 0004)
    sa.Column("result_json", sa.Text, nullable=True),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),
)
sa.Index("ix_task_instance_state", task_instance.c.state)

task_log = sa.Table(
    "task_log",
    metadata,
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("task_id", sa.String(250), primary_key=True),
    sa.Column("try_number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("chunk_seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("stream", sa.String(10), nullable=False),  # "stdout" | "stderr"
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

import_error = sa.Table(
    "import_error",
    metadata,
    sa.Column("fileloc", sa.String(1024), primary_key=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("traceback", sa.Text, nullable=False, default=""),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# Ranges of schedule slots that got no run (core/slot_policy.py), one row per committed skip
# decision; the replicated state keeps only each DAG's newest (migration 0005).
skipped_slots = sa.Table(
    "skipped_slots",
    metadata,
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("last_slot", UTCDateTime, primary_key=True),
    sa.Column("first_slot", UTCDateTime, nullable=False),
    sa.Column("slots", sa.BigInteger, nullable=False),  # 0: not counted
    sa.Column("reason", sa.String(40), nullable=False),
    sa.Column("decided_at", UTCDateTime, nullable=False),
)

node_heartbeat = sa.Table(
    "node_heartbeat",
    metadata,
    sa.Column("node_id", sa.String(250), primary_key=True),
    sa.Column("address", sa.String(250), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),  # leader | follower | candidate | ...
    sa.Column("term", sa.BigInteger, nullable=False),
    sa.Column("commit_index", sa.BigInteger, nullable=False),
    sa.Column("applied_index", sa.BigInteger, nullable=False),
    sa.Column("last_leader_contact", UTCDateTime, nullable=True),
    sa.Column("pid", sa.Integer, nullable=True),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("extra", sa.JSON, nullable=False),  # outbox backlog, version, ...
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("username", sa.String(250), primary_key=True),
    sa.Column("password_hash", sa.String(255), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),  # admin | operator | viewer | worker
    sa.Column("created_at", UTCDateTime, nullable=False),
)

# The outbox materialization watermark: one row (id = 1), ``seq`` = last outbox entry written.
materialize_watermark = sa.Table(
    "materialize_watermark",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=True),
    sa.CheckConstraint("id = 1", name="single_row"),
)

WATERMARK_ROW_ID = 1

# Outbox entries the DB refused (docs/architecture.md §5): the materializer writes everything else
# and parks each refused entry here, with the DB's error, moving the watermark past it.
# ``raftsched db quarantine list|retry`` shows them and writes them again. Every column is
# plain ASCII text or a number, so the row itself cannot be refused.
outbox_quarantine = sa.Table(
    "outbox_quarantine",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(20), nullable=False),  # OutboxKind
    sa.Column("data", sa.Text, nullable=False),  # the entry's data as ASCII JSON (NUL: \u0000)
    sa.Column("error", sa.Text, nullable=False),  # the DB's refusal, truncated, ASCII
    sa.Column("quarantined_at", UTCDateTime, nullable=False),
)

# Variables and connections (docs/architecture.md §5, ``core.persisted``): the Raft state's
# records, ciphertext exactly as the log holds it (a Fernet token; the DB never sees a
# value), so ``cluster rebuild --from-db`` restores them (migration 0005).
secret = sa.Table(
    "secret",
    metadata,
    sa.Column("kind", sa.String(20), primary_key=True),  # variable | connection
    sa.Column("key", sa.String(250), primary_key=True),
    sa.Column("ciphertext", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("updated_at", UTCDateTime, nullable=True),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),
    # The DAGs that may read it, comma-separated; "": every DAG (migration 0010)
    sa.Column("dags", sa.Text, nullable=False, default="", server_default=""),
)

# Callback jobs (docs/architecture.md §13) as they were last changed; ``job`` is the whole
# job (``CallbackJob.to_list()``). Pending and leased ones come back with a rebuild.
callback_job = sa.Table(
    "callback_job",
    metadata,
    sa.Column("job_id", sa.String(1100), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),  # the job's creation order
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("state", sa.String(20), nullable=False),  # pending | running | success | failed
    sa.Column("created_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("job", sa.JSON, nullable=False),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),
)
sa.Index("ix_callback_job_state", callback_job.c.state)

# Who changed what (core/audit.py), every record: the Raft state holds only the newest. Rows are
# written once and never changed (an AUDIT outbox entry is an insert).
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("log_index", sa.BigInteger, nullable=False),
    sa.Column("at", UTCDateTime, nullable=True),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("action", sa.String(40), nullable=False),
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
)
sa.Index("ix_audit_log_at", audit_log.c.at)
sa.Index("ix_audit_log_dag_id_id", audit_log.c.dag_id, audit_log.c.id)
sa.Index("ix_audit_log_actor_id", audit_log.c.actor, audit_log.c.id)

# Pools (core/pool_table.py, docs/architecture.md §19) as an operator last set them; a deleted
# pool's row goes. ``cluster rebuild --from-db`` restores them.
pool = sa.Table(
    "pool",
    metadata,
    sa.Column("name", sa.String(250), primary_key=True),
    sa.Column("slots", sa.BigInteger, nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("updated_at", UTCDateTime, nullable=True),
    sa.Column("outbox_seq", sa.BigInteger, nullable=True),
)

# Asset events (core/asset_table.py, store/asset_rows.py), every one: the Raft state holds
# each asset's newest; and the events each asset-triggered run carried. Written once.
asset_event = sa.Table(
    "asset_event",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("uri", sa.String(1000), nullable=False),
    sa.Column("extra", sa.Text, nullable=False),
    sa.Column("timestamp", UTCDateTime, nullable=False),
    sa.Column("source_dag_id", sa.String(250), nullable=False),
    sa.Column("source_run_id", sa.String(250), nullable=False),
    sa.Column("source_task_id", sa.String(250), nullable=False),
    sa.Column("source_try", sa.Integer, nullable=False),
    sa.Column("event_key", sa.String(200), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
)
sa.Index("ix_asset_event_uri_id", asset_event.c.uri, asset_event.c.id)
asset_event_run = sa.Table(
    "asset_event_run",
    metadata,
    sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("dag_id", sa.String(250), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
)
