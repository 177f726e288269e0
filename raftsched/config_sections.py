"""The config's typed sections: one frozen dataclass per ``[section]`` of ``raftsched.cfg``.

Each field is a key, declared with :func:`~raftsched.config_schema.setting` (default as text,
parser, secret or not); :class:`Config` holds one instance of each section. ``SECTIONS`` and
``KEYS`` list them in file order. Loading, environment overrides and the checks across keys
are in :mod:`raftsched.config`, which re-exports every public name here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from raftsched import config_schema as s
from raftsched.config_schema import setting

DEFAULTS = "defaults"


class _Section:
    """Base of every section: a repr built from display values, so no secret leaks into it."""

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={_repr_value(getattr(self, f.name), s.spec_of(f))!r}"
            for f in fields(self)  # type: ignore[arg-type]
        )
        return f"{type(self).__name__}({shown})"

    def redacted(self) -> dict[str, Any]:
        return {
            f.name: s.display(getattr(self, f.name), s.spec_of(f))
            for f in fields(self)  # type: ignore[arg-type]
        }


def _repr_value(value: Any, spec: s.Setting) -> Any:
    return s.display(value, spec) if spec.secret or spec.mask else value


# setting() returns a dataclasses.field() with no default, so every key is a required argument
# and defaults live in one place, as text (RUF009 cannot see that it is a field).


@dataclass(frozen=True, repr=False)
class CoreConfig(_Section):
    # Read before every other key (see _build): relative paths and derived defaults hang off it.
    home: Path = setting("", s.path())  # noqa: RUF009
    dags_folder: Path = setting("dags", s.path())  # noqa: RUF009
    dag_file_timeout: float = setting("30", s.number(gt=0))
    dag_file_output_limit: int = setting("1048576", s.integer(ge=1))
    load_examples: bool = setting("true", s.boolean)
    logging_level: str = setting("INFO", s.choice("DEBUG", "INFO", "WARNING", "ERROR"))
    log_format: str = setting("text", s.choice("text", "json"))
    airflow_imports: bool = setting("false", s.boolean)
    # The default bound on a mapped task's instances (a DAG's or task's max_map_length wins)
    max_map_length: int = setting("1024", s.integer(ge=1, le=10000))


@dataclass(frozen=True, repr=False)
class DatabaseConfig(_Section):
    url: str = setting("", s.database_url, mask=s.mask_url_password)
    pool_size: int = setting("5", s.integer(ge=1))
    connect_timeout: float = setting("5", s.number(gt=0))


@dataclass(frozen=True, repr=False)
class ClusterConfig(_Section):
    nodes: tuple[str, ...] = setting(
        "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", s.addresses(required=True)
    )
    self_address: str = setting("", s.address(optional=True))  # empty: nodes[0]
    secret: str = setting("", s.text(), secret=True)
    data_dir: Path = setting("data", s.path())  # noqa: RUF009
    raft_min_timeout: float = setting("0.15", s.number(gt=0))
    raft_max_timeout: float = setting("0.45", s.number(gt=0))
    append_entries_period: float = setting("0.03", s.number(gt=0))
    connection_timeout: float = setting("1", s.number(gt=0))
    connection_retry_time: float = setting("1", s.number(gt=0))
    # pysyncobj's own default is 30 s: a cut-off leader would believe it leads for that long.
    leader_fallback_timeout: float = setting("1.5", s.number(gt=0))
    commit_timeout: float = setting("5", s.number(gt=0))
    admin_bind: str = setting("", s.address(optional=True))
    # fsync the Raft journal and term/vote before acknowledging (off: a host crash or power
    # loss may lose acknowledged entries; see README "Benchmarks")
    durable_journal: bool = setting("true", s.boolean)
    # Log compaction (a snapshot) after this many log entries or seconds, whichever comes
    # first; each node's first one comes later by its own offset (raft/settings.py).
    compaction_min_entries: int = setting("5000", s.integer(ge=2))
    compaction_min_seconds: float = setting("300", s.number(gt=0))
    # SIGTERM on the leader: seconds to wait for another node to take over (0: no handover)
    handover_timeout: float = setting("3", s.number(ge=0, le=30))

    @property
    def peers(self) -> tuple[str, ...]:
        """The other nodes: what this node's Raft connects to."""
        return tuple(node for node in self.nodes if node != self.self_address)


@dataclass(frozen=True, repr=False)
class SchedulerConfig(_Section):
    scheduler_heartbeat_sec: float = setting("5", s.number(gt=0))
    min_file_process_interval: float = setting("30", s.number(ge=0))
    max_outbox: int = setting("50000", s.integer(ge=1))
    materialize_batch: int = setting("500", s.integer(ge=1))
    run_retention_sec: float = setting("600", s.number(ge=0))
    max_runs_per_tick: int = setting("500", s.integer(ge=1))
    catchup_by_default: bool = setting("false", s.boolean)
    dags_are_paused_at_creation: bool = setting("false", s.boolean)
    create_cron_data_intervals: bool = setting("false", s.boolean)


@dataclass(frozen=True, repr=False)
class ApiConfig(_Section):
    # Empty: the node's Raft host with port = Raft port + 200 (127.0.0.1:7101 -> :7301).
    grpc_bind: str = setting("", s.address(optional=True))
    admin_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    operator_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    viewer_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    worker_tokens: tuple[str, ...] = setting("", s.words, secret=True)
    # (identity, name) of tokens as the audit log names them (core/audit.py)
    token_names: tuple[tuple[str, str], ...] = setting("", s.token_names)
    tls_cert: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    tls_key: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    tls_ca: Path | None = setting("", s.path(optional=True))  # noqa: RUF009
    max_message_bytes: int = setting("4194304", s.integer(ge=1))
    max_conf_bytes: int = setting("65536", s.integer(ge=1, le=65536))  # core.limits caps it
    # Threads of a node's gRPC server: short calls, and the long polls (Lease, LeaseCallbacks,
    # followed logs), which wait on a pool of their own so they never delay a heartbeat
    # (api/server.py)
    grpc_max_workers: int = setting("64", s.integer(ge=1, le=10_000))
    grpc_max_long_polls: int = setting("1024", s.integer(ge=1, le=100_000))

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None


@dataclass(frozen=True, repr=False)
class WebserverConfig(_Section):
    workers: int = setting("4", s.integer(ge=1))
    worker_class: str = setting("gunicorn.workers.gthread.ThreadWorker", s.text(required=True))
    threads: int = setting("4", s.integer(ge=1))
    bind: str = setting("127.0.0.1:8080", s.address())
    secret_key: str = setting("", s.text(), secret=True)
    grpc_servers: tuple[str, ...] = setting("", s.addresses())
    token: str = setting("", s.text(), secret=True)


@dataclass(frozen=True, repr=False)
class WorkerConfig(_Section):
    concurrency: int = setting("4", s.integer(ge=1))
    # 10 s / 2 s: see docs/architecture.md §11 (room for a failover and a black-holed node
    # between two accepted heartbeats; a dead worker process no longer waits for the TTL)
    lease_ttl: float = setting("10", s.number(ge=1, le=86400))  # core.limits' lease TTL range
    heartbeat_interval: float = setting("2", s.number(gt=0))
    servers: tuple[str, ...] = setting("", s.addresses())
    token: str = setting("", s.text(), secret=True)
    grace_period: float = setting("30", s.number(ge=0))
    # The task queues this worker leases from (a task's `queue=`; `--queues` overrides)
    queues: tuple[str, ...] = setting("default", s.words)
    task_env_allowlist: tuple[str, ...] = setting(
        "PATH,HOME,USER,LOGNAME,SHELL,LANG,LANGUAGE,LC_*,TZ,TMPDIR,PYTHONPATH", s.env_names
    )
    # Tasks run as this user (name or uid), the worker as root: worker/task_user.py
    run_as_user: str = setting("", s.text())
    # GET /metrics of the worker (worker/metrics.py); port 0: not served. Loopback by default:
    # a scraper on another host needs metrics_host set (0.0.0.0, or this host's address)
    metrics_host: str = setting("127.0.0.1", s.text(required=True))
    metrics_port: int = setting("7401", s.integer(ge=0, le=65535))


@dataclass(frozen=True, repr=False)
class TriggererConfig(_Section):
    # Triggers one triggerer runs at once (in one asyncio loop): docs/architecture.md §17
    capacity: int = setting("1000", s.integer(ge=1, le=100_000))
    # A dead triggerer's triggers are leased again this long after its last renewal
    lease_ttl: float = setting("10", s.number(ge=1, le=86400))
    heartbeat_interval: float = setting("2", s.number(gt=0))


@dataclass(frozen=True, repr=False)
class SecretsConfig(_Section):
    # Fernet keys of variables and connections (raftsched/secrets.py): encrypt with the first
    fernet_key: tuple[str, ...] = setting("", s.words, secret=True)


@dataclass(frozen=True)
class Config:
    core: CoreConfig
    database: DatabaseConfig
    cluster: ClusterConfig
    scheduler: SchedulerConfig
    api: ApiConfig
    webserver: WebserverConfig
    worker: WorkerConfig
    secrets: SecretsConfig
    triggerer: TriggererConfig
    source: str = DEFAULTS  # the file read, or "defaults"

    def redacted(self) -> dict[str, Any]:
        """Every value, secrets masked: safe to print, log or return as JSON."""
        shown: dict[str, Any] = {"source": self.source}
        shown.update({name: getattr(self, name).redacted() for name in SECTIONS})
        return shown


SECTIONS: dict[str, type[_Section]] = {
    "core": CoreConfig,
    "database": DatabaseConfig,
    "cluster": ClusterConfig,
    "scheduler": SchedulerConfig,
    "api": ApiConfig,
    "webserver": WebserverConfig,
    "worker": WorkerConfig,
    "secrets": SecretsConfig,
    "triggerer": TriggererConfig,
}

KEYS: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    for name, cls in SECTIONS.items()
}
