"""Real scheduler nodes inside the namespaces: the ``nemesis.Cluster`` used by the runner.

Node i runs ``python -m raftsched --config FILE scheduler --address <ip_i>:7101`` inside
namespace i (all nodes share one config: ``[cluster] nodes`` lists the namespace addresses);
its log goes to ``<workdir>/logs/node-<i>.log``; its admin endpoint is ``http://<ip_i>:7201``,
reached from the root namespace over the bridge, and its gRPC API (what the workers call)
listens at ``<ip_i>:7301`` (Raft port + 200), with the bearer tokens ``api_tokens`` names
(``{"worker_tokens": ..., "admin_tokens": ...}``). The metadata DB is a ``PostgresServer`` on
the bridge address, or, when PostgreSQL cannot run here, a SQLite file in the workdir (the
namespaces share the file system; the ``db-restart`` nemesis is then unavailable).

DAG files can be written after the nodes are up (``write_dags``): their start_date then
follows the moment the cluster could run them, and the nodes pick them up within
``min_file_process_interval``. ``workers`` (a ``workload.Workers``, when set) is what the
``kill-worker`` nemesis kills and restarts.

``Observer`` polls every node's ``/status`` in the background and keeps the leader changes
and every (node, digest_index, digest) it saw, for the report and the checker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts.partition.faults import node_env
from scripts.partition.history import DigestSample
from scripts.partition.netns import Hosts
from scripts.partition.pgserver import PostgresServer

RAFT_PORT = 7101
ADMIN_OFFSET = 100
API_OFFSET = 200
STOP_TIMEOUT = 10.0


def child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAFTSCHED__") and k not in ("RAFTSCHED_HOME", "RAFTSCHED_CONFIG")
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def config_text(sections: Mapping[str, Mapping[str, Any]]) -> str:
    out: list[str] = []
    for section, values in sections.items():
        out += [f"[{section}]", *(f"{k} = {v}" for k, v in values.items()), ""]
    return "\n".join(out)


class NetnsCluster:
    def __init__(
        self,
        hosts: Hosts,
        workdir: Path,
        *,
        dags: Mapping[str, str],
        db: PostgresServer | None,
        db_url: str,
        secret: str = "partition-secret-0123456789abcdef",
        api_tokens: Mapping[str, str] | None = None,
    ) -> None:
        self.network = hosts
        self.hosts = hosts
        self.workdir = workdir
        self.db = db
        self.db_url = db_url
        self.addresses = [f"{h.address}:{RAFT_PORT}" for h in hosts.hosts]
        self.dags_folder = workdir / "dags"
        self.log_dir = workdir / "logs"
        for folder in (self.dags_folder, self.log_dir, workdir / "data"):
            folder.mkdir(parents=True, exist_ok=True)
        self.write_dags(dags)
        self.workers: Any = None  # workload.Workers, for the kill-worker nemesis
        self.triggerers: Any = None  # triggers.Triggerers, for the kill-triggerer nemesis
        self.config_path = workdir / "raftsched.cfg"
        self.config_path.write_text(
            config_text(
                {
                    "core": {
                        "home": workdir,
                        "dags_folder": self.dags_folder,
                        "load_examples": "false",
                        "dag_file_timeout": 20,
                        "logging_level": "INFO",
                    },
                    "database": {"url": db_url, "connect_timeout": 2},
                    "cluster": {
                        "nodes": ",".join(self.addresses),
                        "secret": secret,
                        "data_dir": workdir / "data",
                    },
                    "scheduler": {"scheduler_heartbeat_sec": 1, "min_file_process_interval": 2},
                    "api": dict(api_tokens or {}),
                }
            )
        )
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._paused: set[int] = set()

    # -- Cluster protocol --------------------------------------------------------------------

    @property
    def names(self) -> Sequence[str]:
        return self.addresses

    def namespace(self, i: int) -> str:
        return self.hosts.hosts[i].namespace

    def address(self, i: int) -> str:
        return self.hosts.hosts[i].address

    def pid(self, i: int) -> int | None:
        proc = self._procs.get(i)
        return proc.pid if proc is not None and proc.poll() is None else None

    def leader(self, statuses: Mapping[int, dict[str, Any] | None] | None = None) -> int | None:
        """A node that says it leads with a quorum, confirmed by another node that answers."""
        statuses = self.statuses() if statuses is None else statuses
        best: tuple[int, int] | None = None
        for i, status in statuses.items():
            if not status or status.get("role") != "leader" or not status.get("has_quorum"):
                continue
            named = any(
                j != i and s and s.get("leader") == self.addresses[i] for j, s in statuses.items()
            )
            if named and (best is None or int(status.get("term") or 0) > best[1]):
                best = (i, int(status.get("term") or 0))
        return best[0] if best else None

    def kill(self, i: int) -> None:
        proc = self._procs.get(i)
        self._mark(i, f"kill -9 (pid {proc.pid if proc else None})")
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
        self._paused.discard(i)

    def restart(self, i: int) -> None:
        proc = self._procs.get(i)
        if proc is not None and proc.poll() is None:
            return
        self.start_node(i)

    def stop_signal(self, i: int) -> None:
        self._signal(i, signal.SIGSTOP)
        self._paused.add(i)

    def cont(self, i: int) -> None:
        self._signal(i, signal.SIGCONT)
        self._paused.discard(i)

    def workers_unavailable_reason(self) -> str | None:
        return None if self.workers is not None else "no workers in this run"

    def triggerers_unavailable_reason(self) -> str | None:
        return None if self.triggerers is not None else "no triggerers in this run"

    def kill_worker(self, i: int) -> None:
        self.workers.kill(i)

    def restart_worker(self, i: int) -> None:
        self.workers.restart(i)

    def worker_pid(self, i: int) -> int | None:
        return self.workers.pid(i)

    def db_unavailable_reason(self) -> str | None:
        return None if self.db is not None else "SQLite metadata DB: nothing to restart"

    def db_stop(self) -> None:
        assert self.db is not None
        self.db.stop()

    def db_start(self) -> None:
        assert self.db is not None
        if not self.db.running:
            self.db.start()

    # -- lifecycle ---------------------------------------------------------------------------

    def write_dags(self, dags: Mapping[str, str]) -> None:
        """Write DAG files atomically (a node never parses half a file)."""
        for name, source in dags.items():
            tmp = self.dags_folder / f".{name}.tmp"
            tmp.write_text(source)
            tmp.replace(self.dags_folder / name)

    def migrate(self) -> None:
        log = self.log_dir / "migrate.log"
        argv = [sys.executable, "-m", "raftsched", "--config", str(self.config_path)]
        with open(log, "ab") as out:
            done = subprocess.run(
                [*argv, "db", "migrate"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(),
                timeout=180,
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(f"raftsched db migrate failed:\n{log.read_text()[-3000:]}")

    def start(self) -> None:
        self.migrate()
        for i in range(len(self.addresses)):
            self.start_node(i)

    def start_node(self, i: int) -> None:
        self._mark(i, f"starting node {i} at {self.addresses[i]}")
        argv = [
            sys.executable,
            "-m",
            "raftsched",
            "--config",
            str(self.config_path),
            "scheduler",
            "--address",
            self.addresses[i],
        ]
        with open(self.log_path(i), "ab", buffering=0) as log:
            # the test hooks of the power-loss and clock-skew nemeses (faults.node_env)
            env = node_env(child_env(), self.workdir, self.addresses[i])
            self._procs[i] = self.hosts.start(i, argv, stdout=log, env=env)
        self._paused.discard(i)

    def close(self) -> None:
        """SIGCONT + SIGTERM every node, SIGKILL what is left after a bound."""
        for i, proc in self._procs.items():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGTERM)
                self._paused.discard(i)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT)

    # -- status ------------------------------------------------------------------------------

    def admin_url(self, i: int) -> str:
        return f"http://{self.address(i)}:{RAFT_PORT + ADMIN_OFFSET}/status"

    def status(self, i: int, timeout: float = 1.0) -> dict[str, Any] | None:
        if i in self._paused:
            return None  # a stopped process would only make us wait for the timeout
        try:
            with urllib.request.urlopen(self.admin_url(i), timeout=timeout) as resp:
                return json.loads(resp.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def statuses(self) -> dict[int, dict[str, Any] | None]:
        return {i: self.status(i) for i in range(len(self.addresses))}

    @property
    def api_addresses(self) -> list[str]:
        return [f"{h.address}:{RAFT_PORT + API_OFFSET}" for h in self.hosts.hosts]

    def grpc_serving(self, i: int, timeout: float = 2.0) -> str | None:
        """None when node i's gRPC health check answers SERVING, else what it answered."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        channel = grpc.insecure_channel(self.api_addresses[i])
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError as err:
            return f"{err.code().name}: {err.details()}"  # type: ignore[attr-defined]
        finally:
            channel.close()
        if answer.status != health_pb2.HealthCheckResponse.SERVING:
            return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        return None

    def log_path(self, i: int) -> Path:
        return self.log_dir / f"node-{i}.log"

    def log_tail(self, i: int, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _signal(self, i: int, sig: int) -> None:
        proc = self._procs.get(i)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)

    def _mark(self, i: int, text: str) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
        with contextlib.suppress(OSError), open(self.log_path(i), "a") as log:
            log.write(f"--- {stamp} partition: {text}\n")


class Observer:
    """Background /status poller: leader changes and digests seen during the run."""

    def __init__(self, cluster: NetnsCluster, clock_t0: float, interval: float = 0.5) -> None:
        self.cluster = cluster
        self.interval = interval
        self._t0 = clock_t0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.leader_changes: list[dict[str, Any]] = []
        self.digests: set[DigestSample] = set()
        self.polls = 0
        self._thread = threading.Thread(target=self._loop, name="observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        last: tuple[str | None, int | None] | None = None
        while not self._stop.wait(self.interval):
            statuses = self.cluster.statuses()
            leader = self.cluster.leader(statuses)
            now = (self.cluster.names[leader] if leader is not None else None, None)
            with self._lock:
                self.polls += 1
                for i, status in statuses.items():
                    if status and status.get("digest") and status.get("digest_index") is not None:
                        self.digests.add(
                            DigestSample(
                                self.cluster.names[i],
                                int(status["digest_index"]),
                                str(status["digest"]),
                            )
                        )
                if leader is not None:
                    term = (statuses.get(leader) or {}).get("term")
                    now = (self.cluster.names[leader], term)
                if now != last:
                    self.leader_changes.append(
                        {
                            "t": round(time.monotonic() - self._t0, 3),
                            "wall": datetime.now(UTC).isoformat(),
                            "leader": now[0],
                            "term": now[1],
                        }
                    )
                    last = now
