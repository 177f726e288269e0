"""Two more nemeses (issue #10 part 6): a power loss of every node, and one node's clock skewed.

- ``power-loss``: kill -9 EVERY node at once (one SIGKILL each, sent before any is reaped;
  aimed, within ``AIM_SECONDS``, at a moment when some journal holds unsynced bytes), then
  cut each node's Raft journal back to its last fsynced length (:func:`cut_to_synced`): what
  a power cut of the whole cluster may leave on disk. The nodes run with
  ``RAFTSCHED_TEST_JOURNAL_SYNCED=1`` (:func:`node_env`), so each records its journal's
  durable length in ``raft.journal.synced`` after every fsync (``raftsched.raft.journal``);
  the meta file (term, vote, commit index) is only ever replaced durably and is kept as it
  is. Heal: restart every node. The start event records, per node, the journal's size, its
  durable length and the bytes dropped.
- ``clock-skew``: one node's clock runs ``offset`` seconds ahead (or behind, negative) of
  the others: the offset is written to the file the node reads through
  ``RAFTSCHED_TEST_CLOCK_OFFSET_FILE`` (``raftsched.clock``; ``<node dir>/clock-offset``,
  set by :func:`node_env`; a node re-reads it at most once a second), since the kernel clock
  cannot differ per network namespace. Heal: write 0. The target is the leader when the
  step says so (``leader``: true, and there is one) or else node ``node``.

  How large: the workers run with ``lease_ttl`` 10 s (``workload.LEASE_TTL``), so they
  fence themselves ``fence_margin(10)`` = max(1 s, 20%) = 2 s before a lease could expire by
  their own monotonic clock. A lease is stamped by one node's clock and expired by the
  leader's, so a skew of ``s`` moves the cluster's expiry up to ``s`` earlier in real time;
  the fence still holds while ``s`` < 2 s minus the RPC time between the worker's request
  and the stamp. Offsets are drawn with magnitude in ``SKEW_SECONDS`` (0.5-1.25 s, either
  sign): large enough to show in the stamps, small enough that one holder per attempt must
  still hold (0.75 s or more left of the margin), so a DOUBLE_EXECUTION under skew is a
  real bug, not the test's.

  The checker compares a node's stamp with a worker's wall clock in one place
  (EXECUTED_BEFORE_LEASE: an execution's start against its lease's stamp); that comparison
  gets a tolerance of :func:`max_skew` of the timeline, the largest offset any clock-skew
  step applied (the ``clock_offset`` of its start event, also when a poison step wraps it).
  Comparisons between stamps of committed commands need none (the replicated state keeps a
  monotone clock: a command's time is raised to the latest applied one), nor do those
  between workers' or the runner's wall clocks (unskewed).

Both keep the interface of ``nemesis.Nemesis`` (``nemesis.KINDS`` registers them) without
importing ``nemesis`` (which imports this module).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from raftsched.clock import OFFSET_FILE_ENV
from raftsched.raft.journal import SYNCED_ENV
from raftsched.raft.settings import node_dir

OFFSET_FILE = "clock-offset"
SKEW_SECONDS = (0.5, 1.25)  # magnitude of a clock-skew offset; see the module docstring
JOURNAL = "raft.journal"
SYNCED = "raft.journal.synced"


# -- the nodes' environment -------------------------------------------------------------------


def data_dir(workdir: Path) -> Path:
    """``[cluster] data_dir`` of the partition cluster (``cluster.NetnsCluster``)."""
    return Path(workdir) / "data"


def offset_file(workdir: Path, address: str) -> Path:
    """The clock offset file of the node at ``address`` (``host:raft_port``)."""
    return node_dir(data_dir(workdir), address) / OFFSET_FILE


def node_env(base: Mapping[str, str], workdir: Path, address: str) -> dict[str, str]:
    """``base`` plus the test hooks every partition node runs with: the synced-length record
    of its journal (power-loss) and its clock offset file (clock-skew)."""
    return {
        **base,
        SYNCED_ENV: "1",
        OFFSET_FILE_ENV: str(offset_file(workdir, address)),
    }


# -- power loss -------------------------------------------------------------------------------


def cut_to_synced(data: Path) -> list[dict[str, Any]]:
    """Truncate every journal under ``data`` to its last fsynced length (as
    ``tests/integration/test_cluster_power_loss.py`` does); one record per journal: its node
    directory, size, durable length and the bytes cut. A journal whose record is missing or
    unreadable (killed while writing it) is left whole and says so (``synced``: None)."""
    out: list[dict[str, Any]] = []
    for journal in sorted(Path(data).rglob(JOURNAL)):
        if not journal.is_file():
            continue
        size = journal.stat().st_size
        record: dict[str, Any] = {"node_dir": journal.parent.name, "size": size}
        try:
            length: int | None = int((journal.parent / SYNCED).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            length = None
        record["synced"] = length
        if length is None:
            record["cut"] = 0
            record["note"] = "no readable synced length: journal left whole"
        else:
            keep = min(length, size)  # a follower's dropped tail may end before the record
            with open(journal, "r+b") as f:
                f.truncate(keep)
                os.fsync(f.fileno())
            record["cut"] = size - keep
        out.append(record)
    return out


AIM_SECONDS = 3.0


def unsynced_bytes(data: Path) -> int:
    """Bytes written to the journals under ``data`` past their last fsync, right now."""
    total = 0
    for synced in Path(data).glob(f"*/{SYNCED}"):
        try:
            length = int(synced.read_text().split()[0])
            size = (synced.parent / JOURNAL).stat().st_size
        except (OSError, ValueError, IndexError):
            continue
        total += max(0, size - length)
    return total


def _wait_for_tail(data: Path, seconds: float) -> bool:
    """Poll (every 2 ms) until some journal has an unsynced tail; False after ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        if unsynced_bytes(data) > 0:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.002)


class _Fault:
    """``nemesis.Nemesis``'s interface (see the module docstring for why not a subclass)."""

    name = ""
    timeline: Any = None

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = dict(params or {})

    def unavailable(self, cluster: Any) -> str | None:
        return None

    def start(self, cluster: Any) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self, cluster: Any) -> dict[str, Any]:
        raise NotImplementedError


class PowerLoss(_Fault):
    name = "power-loss"

    def unavailable(self, cluster: Any) -> str | None:
        if getattr(cluster, "workdir", None) is None:
            return "the cluster has no data directory to cut"
        return None

    def start(self, cluster: Any) -> dict[str, Any]:
        n = len(cluster.names)
        leader = cluster.leader()
        # aim: cut the power while some journal holds bytes not yet fsynced (a group commit
        # leaves such a tail for milliseconds only), waiting at most AIM_SECONDS for one
        waited = time.monotonic()
        aimed = _wait_for_tail(
            data_dir(cluster.workdir), float(self.params.get("aim", AIM_SECONDS))
        )
        waited = round(time.monotonic() - waited, 3)
        pids = {i: cluster.pid(i) for i in range(n)}
        for pid in pids.values():  # every node at once: no one fsyncs after another died
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for i in range(n):
            cluster.kill(i)  # reaps (and marks the node's log)
        journals = cut_to_synced(data_dir(cluster.workdir))
        return {
            "nodes": list(cluster.names),
            "pids": [pids[i] for i in range(n)],
            "leader": cluster.names[leader] if leader is not None else None,
            "journals": journals,
            "bytes_cut": sum(j["cut"] for j in journals),
            "aimed_at_unsynced_tail": aimed,
            "aim_waited": waited,
        }

    def stop(self, cluster: Any) -> dict[str, Any]:
        for i in range(len(cluster.names)):
            cluster.restart(i)
        return {"pids": [cluster.pid(i) for i in range(len(cluster.names))]}


# -- clock skew -------------------------------------------------------------------------------


def write_offset(path: Path, seconds: float) -> None:
    """Replace the offset file atomically (a node never reads half a number)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{seconds:.3f}\n")
    tmp.replace(path)


def skew_params(rng: Any, nodes: int) -> dict[str, Any]:
    """A clock-skew step's params, drawn from the schedule's ``random.Random``."""
    node = rng.randrange(nodes)
    magnitude = round(rng.uniform(*SKEW_SECONDS), 3)
    sign = rng.choice([-1, 1])
    return {"node": node, "offset": sign * magnitude, "leader": rng.random() < 0.5}


class ClockSkew(_Fault):
    name = "clock-skew"

    def unavailable(self, cluster: Any) -> str | None:
        if getattr(cluster, "workdir", None) is None:
            return "the cluster has no node directories for clock offset files"
        return None

    def start(self, cluster: Any) -> dict[str, Any]:
        n = len(cluster.names)
        leader = cluster.leader() if self.params.get("leader") else None
        self.node = leader if leader is not None else int(self.params.get("node", 0)) % n
        offset = float(self.params.get("offset", SKEW_SECONDS[0]))
        bound = SKEW_SECONDS[1]
        offset = max(-bound, min(bound, offset))  # never past what the fence margin allows
        self.path = offset_file(cluster.workdir, cluster.names[self.node])
        write_offset(self.path, offset)
        with contextlib.suppress(Exception):
            cluster._mark(self.node, f"clock offset {offset:+.3f}s")
        return {
            "node": cluster.names[self.node],
            "was_leader": leader is not None,
            "clock_offset": offset,
        }

    def stop(self, cluster: Any) -> dict[str, Any]:
        write_offset(self.path, 0.0)
        with contextlib.suppress(Exception):
            cluster._mark(self.node, "clock offset 0")
        return {"node": cluster.names[self.node], "clock_offset_now": 0.0}


def max_skew(events: Sequence[Mapping[str, Any]]) -> float:
    """The largest clock offset (absolute seconds) any step of a timeline applied."""
    skews = [
        abs(float(e["details"]["clock_offset"]))
        for e in events
        if e.get("action") == "start" and "clock_offset" in (e.get("details") or {})
    ]
    return max(skews, default=0.0)
