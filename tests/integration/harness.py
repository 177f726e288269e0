"""ClusterHarness: real `raftsched scheduler` processes on loopback, for tests and benchmarks.

    with ClusterHarness(tmp_path, db_url, dags={"every_second.py": SOURCE}) as cluster:
        leader = cluster.wait_leader()
        cluster.kill(leader)               # kill -9
        cluster.wait_leader(exclude={leader})
        cluster.start_node(leader)         # restart the victim

Each node runs as ``python -m raftsched --config FILE scheduler --address 127.0.0.1:PORT``
with its stdout and stderr appended to ``<workdir>/logs/node-<i>.log``; its admin endpoint is
``http://127.0.0.1:<PORT + 100>/status``. Every wait has a deadline and fails with what it was
waiting for and the last value it saw. Leaving the ``with`` block stops every process the
harness started (SIGCONT, SIGTERM, then SIGKILL after a bound) and, when the block raised,
prints the tail of every node's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from node_hooks import HOOK_ENVS  # tests/integration is on the path of its every user
from sqlalchemy.pool import NullPool

from raftsched.addresses import ADMIN_PORT_OFFSET, API_PORT_OFFSET

T = TypeVar("T")

STOP_TIMEOUT = 10.0
# The entry point that installs node_hooks' test hooks (HOOK_ENVS ask for one)
HOOKED_NODE = Path(__file__).resolve().parent / "hooked_node.py"
LOG_TAIL_LINES = 80


class WaitTimeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited and what was last seen."""


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    describe: Callable[[], Any] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            seen = describe() if describe is not None else last
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last: {seen!r}")
        time.sleep(interval)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` every 20 ms for up to ``timeout`` s; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before or while it was read
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# -- ports ----------------------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_RESERVED = Path(tempfile.gettempdir()) / "raftsched-test-ports"
_RESERVATION_SECONDS = 900.0  # longer than any module's cluster keeps its ports


def _reserve(port: int) -> bool:
    """Claim ``port`` (and its offsets) across test processes: two xdist workers that checked
    the same free group at once both bound it, and one node failed with EADDRINUSE."""
    _RESERVED.mkdir(exist_ok=True)
    mark = _RESERVED / str(port)
    for _ in range(2):
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            try:
                if time.time() - mark.stat().st_mtime < _RESERVATION_SECONDS:
                    return False
                mark.unlink()  # an old claim: its cluster is long gone
            except FileNotFoundError:
                pass
    return False


def free_ports(
    count: int, *, offsets: Iterable[int] = (0, ADMIN_PORT_OFFSET, API_PORT_OFFSET)
) -> list[int]:
    """``count`` ports P such that every P + offset is free on 127.0.0.1 right now.

    Drawn at random below the kernel's ephemeral range, so outgoing connections do not take
    them between this check and the node's bind.
    """
    offsets = tuple(offsets)
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(2000):
        port = random.randrange(12000, 32000 - max(offsets))
        wanted = {port + off for off in offsets}
        if wanted & taken or not all(_port_free(p) for p in wanted):
            continue
        if not _reserve(port):  # another xdist worker chose it and may not have bound it yet
            continue
        chosen.append(port)
        taken |= wanted
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"could not find {count} free port groups on 127.0.0.1")


# -- one node -------------------------------------------------------------------------------


@dataclass
class Node:
    index: int
    address: str
    config_path: Path
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    pids: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.port + ADMIN_PORT_OFFSET}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def argv(self) -> list[str]:
        # A node asked for a test hook (RAFTSCHED_TEST_*) runs the entry point that installs it
        # (by name: RAFTSCHED_TEST_PG_URL and the like are in every child's environment)
        hooked = any(k in HOOK_ENVS for k in self.env)
        return [
            sys.executable,
            *([str(HOOKED_NODE)] if hooked else ["-m", "raftsched"]),
            "--config",
            str(self.config_path),
            "scheduler",
            "--address",
            self.address,
        ]

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"node {self.index} ({self.address}) is already running")
        _mark(self.log_path, f"harness: starting node {self.index} at {self.address}")
        with open(self.log_path, "ab", buffering=0) as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.paused = False
        self.pids.append(self.proc.pid)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9, and reap it."""
        _mark(self.log_path, f"harness: kill -9 node {self.index} (pid {self.pid})")
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=STOP_TIMEOUT)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (after SIGCONT if paused), wait up to ``timeout``, then SIGKILL. Returns
        the exit status (negative: killed by that signal), None if it never ran."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _mark(self.log_path, f"harness: node {self.index} ignored SIGTERM; SIGKILL")
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT)
        return self.proc.returncode

    def status(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """GET /status, or None when the node does not answer (dead, paused, starting)."""
        if not self.alive or self.paused:
            return None
        try:
            with urllib.request.urlopen(f"{self.admin_url}/status", timeout=timeout) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            content = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "<no log>"
        return "\n".join(content[-lines:])


# -- the cluster ----------------------------------------------------------------------------


def config_text(sections: Mapping[str, Mapping[str, Any]]) -> str:
    out: list[str] = []
    for section, values in sections.items():
        out.append(f"[{section}]")
        out += [f"{key} = {value}" for key, value in values.items()]
        out.append("")
    return "\n".join(out)


def every_second_dag(
    dag_id: str,
    *,
    start: datetime,
    end: datetime | None = None,
    catchup: bool = True,
    schedule: str = "* * * * * *",
) -> str:
    """Source of a DAG file with one trivial task and a 1-second schedule."""
    end_arg = f"datetime.fromisoformat({end.isoformat()!r})" if end is not None else "None"
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        with DAG(
            {dag_id!r},
            schedule={schedule!r},
            start_date=datetime.fromisoformat({start.isoformat()!r}),
            end_date={end_arg},
            catchup={catchup!r},
            max_active_runs=100000,
        ) as dag:
            BashTask("noop", command="true")
        """
    )


def second_dags(
    count: int, *, start: datetime, end: datetime | None, prefix: str = "every_second"
) -> dict[str, str]:
    """``count`` DAG files ``{prefix}_<i>.py`` with 1-second schedules and catch-up."""
    return {
        f"{prefix}_{i}.py": every_second_dag(f"{prefix}_{i}", start=start, end=end)
        for i in range(count)
    }


def whole_second(value: datetime) -> datetime:
    return value.replace(microsecond=0)


def second_slots(start: datetime, end: datetime) -> list[datetime]:
    """Every whole second from ``start`` to ``end``, both included."""
    first = whole_second(start)
    if first < start:
        first += timedelta(seconds=1)
    count = int((end - first).total_seconds()) + 1
    return [first + timedelta(seconds=i) for i in range(max(0, count))]


class StatusRecorder:
    """Polls every node's /status in the background: keeps a history (for "was back-pressure
    ever reported?") and every (digest_index -> node -> digest) seen, to compare replicas."""

    def __init__(self, nodes: list[Node], interval: float = 0.2) -> None:
        self._nodes = nodes
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.history: deque[tuple[float, int, dict[str, Any]]] = deque(maxlen=50000)
        self.digests: dict[int, dict[int, str]] = {}
        self._thread = threading.Thread(target=self._loop, name="status-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            for node in self._nodes:
                status = node.status(timeout=0.5)
                if status is not None:
                    self.record(node.index, status)

    def record(self, index: int, status: dict[str, Any]) -> None:
        with self._lock:
            self.history.append((time.monotonic(), index, status))
            digest, at = status.get("digest"), status.get("digest_index")
            if digest and at is not None:
                self.digests.setdefault(int(at), {})[index] = str(digest)

    def seen(self, predicate: Callable[[int, dict[str, Any]], bool]) -> bool:
        with self._lock:
            return any(predicate(index, status) for _, index, status in self.history)

    def digest_conflicts(self) -> dict[int, dict[int, str]]:
        """digest_index -> {node: digest} where nodes at the same index disagree."""
        with self._lock:
            return {
                at: dict(by_node)
                for at, by_node in self.digests.items()
                if len(set(by_node.values())) > 1
            }

    def digest_comparisons(self) -> int:
        """How many digest indexes were seen on at least two nodes (compared)."""
        with self._lock:
            return sum(1 for by_node in self.digests.values() if len(by_node) >= 2)


class ClusterHarness:
    """N real scheduler nodes on free loopback ports, sharing one config file and one DB."""

    def __init__(
        self,
        workdir: Path,
        db_url: str,
        *,
        nodes: int = 3,
        dags: Mapping[str, str] | None = None,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        secret: str = "harness-secret-0123456789",
        ports: list[int] | None = None,
        migrate: bool = True,
    ) -> None:
        self.workdir = Path(workdir)
        self.db_url = db_url
        self.secret = secret
        self.dags_folder = self.workdir / "dags"
        self.data_dir = self.workdir / "data"
        self.log_dir = self.workdir / "logs"
        self.config_path = self.workdir / "raftsched.cfg"
        for folder in (self.dags_folder, self.data_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for name, source in (dags or {}).items():
            (self.dags_folder / name).write_text(source)
        ports = ports or free_ports(nodes)
        self.addresses = [f"127.0.0.1:{port}" for port in ports]
        self.sections = self._sections(config or {})
        self.config_path.write_text(config_text(self.sections))
        env = child_env()
        self.nodes = [
            Node(i, addr, self.config_path, self.log_dir / f"node-{i}.log", env)
            for i, addr in enumerate(self.addresses)
        ]
        self.extra: list[Node] = []  # intruders and other processes started by a test
        self.recorder = StatusRecorder(self.nodes)
        self._migrate = migrate
        self._engine: sa.Engine | None = None

    def _sections(self, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        sections: dict[str, dict[str, Any]] = {
            "core": {
                "home": self.workdir,
                "dags_folder": self.dags_folder,
                "load_examples": "false",
                "dag_file_timeout": 20,
                "logging_level": "INFO",
            },
            "database": {"url": self.db_url, "connect_timeout": 2},
            "cluster": {
                "nodes": ",".join(self.addresses),
                "secret": self.secret,
                "data_dir": self.data_dir,
            },
            "scheduler": {
                "scheduler_heartbeat_sec": 1,
                "min_file_process_interval": 2,
            },
        }
        for section, values in overrides.items():
            sections.setdefault(section, {}).update(values)
        return sections

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> ClusterHarness:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None:
                self.print_logs()
        finally:
            self.close()

    def start(self) -> ClusterHarness:
        if self._migrate:
            self.migrate()
        for node in self.nodes:
            node.start()
        self.recorder.start()
        return self

    def migrate(self) -> None:
        """``raftsched db migrate`` against the test database (idempotent)."""
        log = self.log_dir / "migrate.log"
        cmd = [sys.executable, "-m", "raftsched", "--config", str(self.config_path)]
        with open(log, "ab") as out:
            done = subprocess.run(
                [*cmd, "db", "migrate"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(),
                timeout=120,
                check=False,
            )
        if done.returncode != 0:
            raise AssertionError(f"raftsched db migrate failed:\n{log.read_text()[-3000:]}")

    def close(self) -> None:
        self.recorder.stop()
        procs = [n for n in [*self.nodes, *self.extra] if n.proc is not None]
        for node in procs:
            if node.paused:
                node.resume()
            node.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for node in procs:
            assert node.proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if node.proc.poll() is None:
                _mark(node.log_path, "harness: did not stop on SIGTERM in time; SIGKILL")
                node.signal(signal.SIGKILL)
                node.proc.wait(timeout=STOP_TIMEOUT)
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def print_logs(self, lines: int = LOG_TAIL_LINES) -> None:
        for node in [*self.nodes, *self.extra]:
            print(
                f"\n===== node {node.index} {node.address} pid {node.pid} "
                f"({node.log_path}), last {lines} lines =====\n{node.log_tail(lines)}",
                file=sys.stderr,
            )

    def start_node(self, index: int) -> None:
        self.nodes[index].start()

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def pause(self, index: int) -> None:
        self.nodes[index].pause()

    def resume(self, index: int) -> None:
        self.nodes[index].resume()

    def stop_node(self, index: int) -> int | None:
        return self.nodes[index].stop()

    def all_pids(self) -> list[int]:
        return [pid for node in [*self.nodes, *self.extra] for pid in node.pids]

    # -- status -------------------------------------------------------------------------

    def status(self, index: int) -> dict[str, Any] | None:
        return self.nodes[index].status()

    def statuses(self) -> dict[int, dict[str, Any] | None]:
        return {node.index: node.status() for node in self.nodes}

    def leader(self) -> int | None:
        """The index of a node that says it leads with a quorum and is named leader by at
        least one other node that answers; None when there is no such node."""
        statuses = self.statuses()
        for index, status in statuses.items():
            if not status or status.get("role") != "leader" or not status.get("has_quorum"):
                continue
            address = self.addresses[index]
            followers = [
                s for i, s in statuses.items() if i != index and s and s.get("leader") == address
            ]
            if followers:
                return index
        return None

    def wait_leader(self, timeout: float = 45.0, exclude: Iterable[int] = ()) -> int:
        """A settled leader: one that every node answering /status follows. A young cluster
        elects a leader before its last node has connected (pysyncobj reconnects every
        connection_retry_time), and that node may then force one more election; tests that
        watch leadership must start after that. Down or paused nodes do not answer."""
        excluded = set(exclude)

        def found() -> int | None:
            index = self.leader()
            if index is None or index in excluded:
                return None
            address = self.addresses[index]
            answering = [s for s in self.statuses().values() if s]
            if any(s.get("leader") != address for s in answering):
                return None
            return index + 1  # truthy

        return (
            wait_for(
                found,
                timeout=timeout,
                what=f"a leader (not {sorted(excluded)})" if excluded else "a leader",
                interval=0.1,
                describe=self.brief,
            )
            - 1
        )

    def wait_all_up(self, timeout: float = 45.0) -> None:
        wait_for(
            lambda: all(n.status() for n in self.nodes),
            timeout=timeout,
            what="every node answering /status",
            describe=self.brief,
        )

    def brief(self) -> dict[int, Any]:
        """A compact view of every node's status, for failure messages."""
        keys = (
            "role",
            "term",
            "leader",
            "has_quorum",
            "commit_index",
            "applied_index",
            "digest_index",
            "outbox_size",
            "db_watermark",
            "backpressure",
        )
        out: dict[int, Any] = {}
        for index, status in self.statuses().items():
            node = self.nodes[index]
            if status is None:
                out[index] = "paused" if node.paused else ("down" if not node.alive else "silent")
            else:
                out[index] = {k: status.get(k) for k in keys}
        return out

    def wait_caught_up(self, timeout: float = 60.0, *, outbox: bool = True) -> None:
        """One leader; every other node has applied what the leader had committed; and
        (``outbox``) the DB watermark has reached the leader's last outbox entry."""

        def settled() -> bool:
            leader = self.leader()
            if leader is None:
                return False
            ahead = self.status(leader)
            others = [node.status() for node in self.nodes if node.index != leader]
            if not ahead or ahead.get("role") != "leader" or not all(others):
                return False
            if any(o["applied_index"] < ahead["commit_index"] for o in others if o):
                return False
            watermark = ahead.get("db_watermark")
            return not outbox or (
                watermark is not None and watermark >= (ahead.get("outbox_last_seq") or 0)
            )

        wait_for(settled, timeout=timeout, what="the cluster to settle", describe=self.brief)

    # -- digests ------------------------------------------------------------------------

    def assert_replicas_agree(self, *, min_comparisons: int = 0) -> None:
        """Invariant 5: nodes seen at the same digest_index reported the same digest."""
        conflicts = self.recorder.digest_conflicts()
        assert not conflicts, f"replicas diverged (digest_index -> node -> digest): {conflicts}"
        compared = self.recorder.digest_comparisons()
        assert compared >= min_comparisons, (
            f"only {compared} digest indexes were seen on two nodes or more"
            f" (wanted {min_comparisons}): {self.brief()}"
        )

    def digest_samples(self) -> list[tuple[int, int, str]]:
        """(node, digest_index, digest) for every node that answers."""
        out = []
        for index, status in self.statuses().items():
            if status and status.get("digest_index") is not None and status.get("digest"):
                out.append((index, int(status["digest_index"]), str(status["digest"])))
        return out

    # -- the database -------------------------------------------------------------------

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.db_url, poolclass=NullPool)
        return self._engine

    def runs(self) -> list[tuple[str, datetime, str]]:
        """(dag_id, logical_date (aware UTC), run_id) of every row in dag_run; [] without
        the table yet."""
        from raftsched.store.tables import dag_run

        try:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    sa.select(dag_run.c.dag_id, dag_run.c.logical_date, dag_run.c.run_id)
                ).all()
        except sa.exc.OperationalError:
            return []
        except sa.exc.ProgrammingError:
            return []
        return [(r.dag_id, _aware(r.logical_date), r.run_id) for r in rows]

    def run_dates(self) -> dict[str, list[datetime]]:
        """Logical dates per DAG, sorted, duplicates kept (so a test can see them)."""
        out: dict[str, list[datetime]] = {}
        for dag_id, logical_date, _ in self.runs():
            out.setdefault(dag_id, []).append(logical_date)
        return {dag_id: sorted(dates) for dag_id, dates in out.items()}


def wait_for_slots(
    cluster: ClusterHarness, expected: Mapping[str, list[datetime]], *, timeout: float
) -> None:
    """Wait until the DB holds every expected slot, then assert it holds exactly those."""

    def complete() -> bool:
        actual = cluster.run_dates()
        return all(set(slots) <= set(actual.get(d, [])) for d, slots in expected.items())

    def summary() -> Any:
        actual = cluster.run_dates()
        return {
            "runs": {d: len(v) for d, v in actual.items()},
            "expected": {d: len(v) for d, v in expected.items()},
            "problems": check_slots(actual, expected)[:6],
            "nodes": cluster.brief(),
        }

    wait_for(complete, timeout=timeout, what="every expected run in the DB", describe=summary)
    problems = check_slots(cluster.run_dates(), expected)
    assert not problems, "\n".join(problems)


def check_slots(
    actual: Mapping[str, list[datetime]], expected: Mapping[str, list[datetime]]
) -> list[str]:
    """Problems (duplicates, gaps, extras) of the runs per DAG against the expected slots."""
    problems: list[str] = []
    for dag_id, slots in expected.items():
        got = actual.get(dag_id, [])
        dupes = sorted({d for d in got if got.count(d) > 1})
        missing = sorted(set(slots) - set(got))
        extra = sorted(set(got) - set(slots))
        if dupes:
            problems.append(f"{dag_id}: {len(dupes)} duplicated slots, e.g. {_fmt(dupes)}")
        if missing:
            problems.append(
                f"{dag_id}: {len(missing)} of {len(slots)} slots missing, e.g. {_fmt(missing)}"
            )
        if extra:
            problems.append(f"{dag_id}: {len(extra)} unexpected runs, e.g. {_fmt(extra)}")
    for dag_id in set(actual) - set(expected):
        problems.append(f"{dag_id}: runs of an unexpected DAG ({len(actual[dag_id])})")
    return problems


def _fmt(dates: list[datetime]) -> str:
    return ", ".join(d.isoformat() for d in dates[:5])


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAFTSCHED__") and k not in ("RAFTSCHED_HOME", "RAFTSCHED_CONFIG")
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _mark(path: Path, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as log:
        log.write(f"--- {stamp} {text}\n")


def utcnow() -> datetime:
    return datetime.now(UTC)
