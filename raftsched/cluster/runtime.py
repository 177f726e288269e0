"""One scheduler node process, wired: Raft node, leader loop, materializer, heartbeats, admin.

``NodeRuntime.from_config(config, self_address=...)`` builds everything from the config (the
metadata DB engine included); tests build one from ``RaftSettings`` + ``LoopSettings`` and an
``OutboxSink`` (e.g. ``MemoryMaterializer``). ``start()`` then ``stop()`` (idempotent: stops
the threads, destroys the SyncObj, disposes the engine). ``status()`` is the JSON of
``GET /status``.

With an ``api_factory`` the node also serves an API: ``api_factory(runtime)`` returns an
object with ``start()`` and ``stop()``, built once the Raft node exists and stopped first. The
``scheduler`` command passes one that builds ``raftsched.api.node_api.NodeApi`` (the raftsched.v1
gRPC API on ``[api] grpc_bind``, or on the Raft host with Raft port + 200): this package is
Raft and the leader loop only, and imports nothing from ``raftsched.api``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from raftsched import __version__, logging_setup
from raftsched.cluster.admin import AdminServer
from raftsched.cluster.heartbeat import HeartbeatWriter
from raftsched.cluster.leader import LeaderLoop, LoopSettings
from raftsched.cluster.materializer_driver import MaterializerDriver
from raftsched.cluster.metrics import NodeInstruments, NodeMetrics
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer
from raftsched.cluster.workers_seen import EXTRA_KEY, LOST_KEY, WorkersSeen
from raftsched.core.model import OutboxEntry
from raftsched.core.versions import RELEASE
from raftsched.dags import mapping as dag_mapping
from raftsched.dags.parser import configure_airflow
from raftsched.errors import StoreUnavailable
from raftsched.raft.settings import RaftSettings, settings_from_config
from raftsched.store.abc import OutboxSink
from raftsched.store.heartbeats import NodeHeartbeat

log = logging.getLogger(__name__)


class NodeRuntime:
    def __init__(
        self,
        settings: RaftSettings,
        loop_settings: LoopSettings,
        sink: OutboxSink,
        *,
        materialize_batch: int = 500,
        heartbeat_write: Callable[[NodeHeartbeat], None] | None = None,
        admin: bool = True,
        on_close: Callable[[], None] | None = None,
        api_factory: Callable[[NodeRuntime], Any] | None = None,
        engine: Any = None,
        default_lease_ttl: float = 30.0,
    ) -> None:
        self.settings = settings
        logging_setup.set_node_id(settings.self_address)  # "node" of every log line
        self.loop_settings = loop_settings
        self.sink = sink
        self._materialize_batch = materialize_batch
        self._heartbeat_write = heartbeat_write
        self._admin_enabled = admin
        self._on_close = on_close
        self.api_factory = api_factory
        self.fernet_keys: tuple[str, ...] = ()  # [secrets] fernet_key (from_config sets it)
        self.engine = engine
        self.default_lease_ttl = default_lease_ttl
        self.api: Any = None  # what api_factory built, once started
        self.node: SchedulerNode | None = None
        self.proposer: Proposer | None = None
        self.leader_loop: LeaderLoop | None = None
        self.materializer: MaterializerDriver | None = None
        self.heartbeats: HeartbeatWriter | None = None
        self.admin: AdminServer | None = None
        # the workers that called this node's API lately, published in its heartbeat row
        self.workers_seen = WorkersSeen()
        self._stopped = False
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls,
        config: Any,
        *,
        self_address: str | None = None,
        api_factory: Callable[[NodeRuntime], Any] | None = None,
    ) -> NodeRuntime:
        from raftsched.store.engine import create_engine_for
        from raftsched.store.heartbeats import record_heartbeat
        from raftsched.store.materializer import Materializer

        settings = settings_from_config(config, self_address=self_address)
        engine = create_engine_for(
            config.database.url,
            connect_timeout=config.database.connect_timeout,
            pool_size=config.database.pool_size,
        )
        sched = config.scheduler
        configure_airflow(  # what the DAG-parse children get (raftsched.airflow)
            imports=config.core.airflow_imports,
            create_cron_data_intervals=sched.create_cron_data_intervals,
        )
        dag_mapping.configure(config.core.max_map_length)
        loop_settings = LoopSettings(
            dags_folder=config.core.dags_folder,
            dag_file_timeout=config.core.dag_file_timeout,
            dag_file_output_limit=config.core.dag_file_output_limit,
            min_file_process_interval=sched.min_file_process_interval,
            scheduler_heartbeat_sec=sched.scheduler_heartbeat_sec,
            max_outbox=sched.max_outbox,
            max_runs_per_tick=sched.max_runs_per_tick,
            run_retention_sec=sched.run_retention_sec,
            catchup_by_default=sched.catchup_by_default,
            dags_are_paused_at_creation=sched.dags_are_paused_at_creation,
        )
        runtime = cls(
            settings,
            loop_settings,
            MigratingSink(Materializer(engine), engine),
            materialize_batch=sched.materialize_batch,
            heartbeat_write=lambda beat: record_heartbeat(engine, beat),
            on_close=engine.dispose,
            api_factory=api_factory,
            engine=engine,
            default_lease_ttl=config.worker.lease_ttl,
        )
        runtime.fernet_keys = config.secrets.fernet_key  # for the API's SecretService
        return runtime

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the node and its threads. Call from the main thread: pysyncobj's tick thread
        stops when the thread that created the SyncObj exits."""
        s = self.settings
        logging_setup.set_node_id(s.self_address)  # "node" of every log line
        log.info(
            "starting node %s (cluster %s, data in %s)",
            s.self_address,
            ",".join(s.nodes),
            s.node_dir,
        )
        instruments = NodeInstruments()  # this node's own registry (several nodes per process)
        if self._admin_enabled:  # bind first: a port clash fails before Raft starts
            metrics = NodeMetrics(self.status, instruments, node=lambda: self.node)
            self.admin = AdminServer(s.admin_address, self.status, metrics=metrics.render)
        self.node = node = SchedulerNode(s, instruments=instruments)
        logging_setup.set_term_provider(lambda: node.term)  # "term" of log lines
        self.proposer = Proposer(node, commit_timeout=s.commit_timeout)
        self.leader_loop = LeaderLoop(node, self.proposer, self.loop_settings)
        self.materializer = MaterializerDriver(
            node,
            self.proposer,
            self.sink,
            batch=self._materialize_batch,
            idle_wait=self.loop_settings.scheduler_heartbeat_sec,
            run_retention_sec=self.loop_settings.run_retention_sec,
        )
        # The DB and the log must agree before this node, as leader, schedules or leases.
        self.leader_loop.hold = self.materializer.hold_reason
        self.materializer.on_checked = self.leader_loop.wake
        node.command_gate = self.materializer.refuses
        self.leader_loop.start()
        self.materializer.start()
        if self._heartbeat_write is not None:
            self.heartbeats = HeartbeatWriter(
                self._heartbeat,
                self._heartbeat_write,
                interval=self.loop_settings.scheduler_heartbeat_sec,
            )
            self.heartbeats.start()
        if self.admin is not None:
            self.admin.start()
        if self.api_factory is not None:
            self.api = self.api_factory(self)
            self.api.start()

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        log.info("stopping node %s", self.settings.self_address)
        self._hand_over()
        for part in (self.api, self.admin, self.heartbeats, self.leader_loop, self.materializer):
            if part is not None:
                try:
                    part.stop()
                except Exception:
                    log.exception("stopping %s failed", type(part).__name__)
        if self.node is not None:
            self.node.close()
        if self._on_close is not None:
            self._on_close()

    def _hand_over(self) -> None:
        """A leader that stops hands over first (``[cluster] handover_timeout``): it proposes
        nothing more (leader loop and materializer stop, so no entry of its own is in flight or
        lost when the term ends and the follower it picks holds every entry), then waits until
        another node leads. Its API keeps serving meanwhile: workers' calls are forwarded to
        whichever node leads. A follower stops at once."""
        node = self.node
        timeout = self.settings.handover_timeout
        if node is None or timeout <= 0 or not node.is_leader:
            return
        for part in (self.leader_loop, self.materializer):
            if part is not None:
                try:
                    part.stop()
                except Exception:
                    log.exception("stopping %s failed", type(part).__name__)
        try:
            node.raft.hand_over(timeout)
        except Exception:  # a failed handover must not keep the process from stopping
            log.exception("handing leadership over failed; stopping anyway")

    @property
    def fatal_error(self) -> str | None:
        return self.node.fatal_error if self.node is not None else None

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        node = self.node
        assert node is not None, "status() before start()"
        digest_index, digest = node.digest()
        outbox = node.read(lambda st: (st.outbox_size, st.outbox_last_seq, st.outbox_acked_seq))
        loop = self.leader_loop
        mat = self.materializer
        contact = node.last_leader_contact
        return {
            "node_id": self.settings.self_address,
            "address": self.settings.self_address,
            "admin_address": self.admin.address if self.admin else self.settings.admin_address,
            "api_address": self.api.address if self.api is not None else None,
            "pid": os.getpid(),
            "role": node.role,
            "term": node.term,
            "leader": node.leader_address,
            "has_quorum": node.quorum,
            "commit_index": node.raft.commit_index,
            "applied_index": node.raft.last_applied,
            "digest": digest,
            "digest_index": digest_index,
            "outbox_size": outbox[0],
            "outbox_last_seq": outbox[1],
            "outbox_acked_seq": outbox[2],
            "db_watermark": mat.db_watermark if mat else None,
            "db_ok": mat.store_ok if mat else None,
            "quarantined": mat.quarantined if mat else None,
            "materializer_error": (mat.mismatch or mat.last_error) if mat else None,
            "db_log_mismatch": mat.mismatch if mat else None,
            "backpressure": loop.backpressure_now(outbox[0]) if loop else False,
            "became_leader_at": loop.became_leader_at if loop else None,
            "first_commit_at": loop.first_commit_at if loop else None,
            "last_leader_contact": contact,
            "fatal_error": node.fatal_error,
            "apply_error": getattr(node, "apply_error", None),
            # rolling upgrades (cluster/versions.py): this node's release, the committed
            # cluster version, and (as leader) the release each member reported
            "version": __version__,
            "release": RELEASE,
            "cluster_version": node.cluster_version,
            "member_releases": node.member_releases() if node.is_leader else None,
            "time": time.time(),
        }

    def _heartbeat(self) -> NodeHeartbeat:
        status = self.status()
        contact = status["last_leader_contact"]
        return NodeHeartbeat(
            node_id=status["node_id"],
            address=status["address"],
            role=status["role"],
            term=status["term"],
            commit_index=status["commit_index"],
            applied_index=status["applied_index"],
            updated_at=datetime.now(UTC),
            last_leader_contact=datetime.fromtimestamp(contact, UTC) if contact else None,
            pid=status["pid"],
            extra={
                "outbox_size": status["outbox_size"],
                "outbox_last_seq": status["outbox_last_seq"],
                "acked_seq": status["outbox_acked_seq"],
                "backpressure": status["backpressure"],
                "db_watermark": status["db_watermark"],
                "leader": status["leader"],
                LOST_KEY: self.workers_seen.lost(),  # before published(): its silent ones
                EXTRA_KEY: self.workers_seen.published(),
            },
        )


class MigratingSink:
    """The DB materializer, migrating the schema (``init_db``) before its first use: a node
    can start while the DB is down, and migrates when it comes back."""

    def __init__(self, inner: OutboxSink, engine: Any) -> None:
        self._inner = inner
        self._engine = engine
        self._ready = False
        self._lock = threading.Lock()

    def ensure_schema(self) -> None:
        from raftsched.store.migrate import init_db

        with self._lock:
            if self._ready:
                return
            status = init_db(self._engine)
            if not status.at_head:
                log.info("metadata DB migrated from %s to %s", status.current, status.head)
            self._ready = True

    def watermark(self) -> int:
        self.ensure_schema()
        return self._inner.watermark()

    def write(self, entries: Sequence[OutboxEntry]) -> int:
        self.ensure_schema()
        return self._inner.write(entries)

    def quarantined_count(self) -> int:
        self.ensure_schema()
        return self._inner.quarantined_count()


def try_migrate(sink: OutboxSink) -> bool:
    """Migrate at start if the DB answers; False (logged) when it is down."""
    if not isinstance(sink, MigratingSink):
        return True
    try:
        sink.ensure_schema()
    except StoreUnavailable as err:
        log.warning("metadata DB unavailable at start (%s); will migrate when it returns", err)
        return False
    return True
