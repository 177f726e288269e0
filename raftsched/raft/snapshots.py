"""Raft snapshots written by a forked child, while the node goes on applying.

The state is copied by the kernel: a forked child (copy-on-write pages) serializes,
compresses and fsyncs it, then renames it over the node's dump file. The tick thread waits
only for the fork itself (page tables: milliseconds for a GiB), where it used to hold the state
lock for the whole ``snapshot()`` + pickle + gzip + fsync (0.5-1 s at 10,000 live runs:
elections). A thread would not do: serializing holds the GIL, and the tick thread would wait
for it all the same.

Contract of :class:`ForkedSnapshotWriter` (one per node, used on the tick thread only):

- ``start(state, raft, lock)`` forks under ``lock`` (no reader is half-way through the state)
  and returns at once; RuntimeError while a writer runs.
- ``progress()`` is pysyncobj's ``serializeChecker``: SERIALIZING while the child runs, then
  SUCCESS once the file is durably in place (pysyncobj then compacts the log), or FAILED
  (logged with the child's reason; the log is kept). After a failure it says SERIALIZING for
  ``retry_after`` seconds more: pysyncobj retries at its next tick otherwise, and a failure
  that comes at once (a full disk) would fork a writer every tick.
- A child still running ``timeout`` seconds after the fork is stuck (a lock that a thread of
  the parent held when it forked, say: that thread does not exist in the child, so nothing
  ever releases it). It is asked for its stack (``DUMP_SIGNAL``, which the child's
  faulthandler writes to ``<dump>.error``), killed ``DUMP_GRACE`` later, and reported FAILED
  with that stack. Before this, a stuck writer stopped compaction for good, silently.
- ``refuse(reason)`` raises instead of starting (the node's state machine is stopped, a fork
  failed): pysyncobj's serializer then waits for a FAILED before it ever serializes again,
  which ``progress()`` gives once, logged.
- ``stop()`` kills a running child (node shutdown).

The child runs nothing but the serialization: it turns the cyclic GC off (a collection would
run the finalizers of other threads' garbage, which may wait for locks no thread of the child
will release), closes every inherited descriptor (a restarted node must find its ports free
even while the child still writes), never logs, never touches gRPC or the DB, and reports a
failure in ``<dump>.error``, a success in ``<dump>.done`` (its pid: how the parent knows, when
a ``waitpid(-1)`` elsewhere in the process reaped the child first). gRPC's fork handlers
would restart gRPC's threads in the child, which then aborts: ``raftsched scheduler`` turns
them off before gRPC loads (``GRPC_ENABLE_FORK_SUPPORT=false``).

pysyncobj renames its temporary path over the dump file as soon as the serializer returns.
The child never writes there (it writes ``<dump>.writing`` and renames it itself): pysyncobj's
rename then finds nothing, fails quietly, and ``progress`` decides.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import gzip
import logging
import os
import pickle
import signal
import time
from typing import Any, NoReturn

from pysyncobj.config import SERIALIZER_STATE

from raftsched.core.snapshot import without_gc
from raftsched.raft.journal import fsync_dir

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 1
_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
# A snapshot of 100,000 DAGs takes seconds; one still running after ten minutes is stuck.
WRITER_TIMEOUT = 600.0
RETRY_AFTER = 30.0  # seconds between a failed snapshot and the next try
DUMP_SIGNAL = signal.SIGUSR1  # a stuck child's faulthandler writes its stack on this
DUMP_GRACE = 1.0  # seconds between asking a stuck child for its stack and killing it


class ForkedSnapshotWriter:
    def __init__(
        self,
        dump: str,
        instruments: Any,
        *,
        timeout: float = WRITER_TIMEOUT,
        retry_after: float = RETRY_AFTER,
    ) -> None:
        self.dump = dump
        self.timeout = timeout
        self.retry_after = retry_after
        self._instruments = instruments
        self._child: tuple[int, float, Any] | None = None
        self._stack_asked: float | None = None  # when a stuck child was asked for its stack
        self._refusal: str | None = None
        self._retry_at = 0.0

    @property
    def running(self) -> bool:
        return self._child is not None

    def refuse(self, reason: str) -> NoReturn:
        """Write no snapshot this time (pysyncobj's serializer sees the error)."""
        self._refusal = reason
        raise RuntimeError(reason)

    def start(self, state: Any, raft: tuple[Any, ...], lock: Any, tmp_path: str) -> None:
        if self._child is not None:
            raise RuntimeError("a snapshot is already being written")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path)  # a leftover must not be renamed over the dump by pysyncobj
        started = time.perf_counter()
        with lock:
            try:
                pid = os.fork()
            except OSError as err:
                self.refuse(f"cannot fork the snapshot writer: {err}")
            if pid == 0:
                _child_main(state, raft, self.dump)
        self._child = (pid, started, entry_index(raft))
        self._stack_asked = None
        self._instruments.snapshot_pause.observe(time.perf_counter() - started)

    def progress(self) -> int:
        now = time.perf_counter()
        if self._refusal is not None:
            log.warning(
                "no snapshot this time: %s; the log is kept and compaction is retried in %gs",
                self._refusal,
                self.retry_after,
            )
            self._refusal = None
            return self._failed(now)
        child = self._child
        if child is None:
            waiting = now < self._retry_at
            return SERIALIZER_STATE.SERIALIZING if waiting else SERIALIZER_STATE.NOT_SERIALIZING
        pid, started, index = child
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by a waitpid(-1) elsewhere in the process
            done, status = pid, 0 if _done_marker(self.dump) == pid else -1
        if done == 0:
            self._watch(pid, now - started, now)
            return SERIALIZER_STATE.SERIALIZING
        self._child = None
        took = now - started
        if status == 0:
            self._instruments.snapshot_duration.observe(took)
            log.info("snapshot written at log index %s in %.3fs (forked writer)", index, took)
            return SERIALIZER_STATE.SUCCESS
        stuck = self._stack_asked is not None
        log.error(
            "writing the snapshot at log index %s failed (%s): %s; the log is kept and"
            " compaction is retried in %gs",
            index,
            f"stuck for over {self.timeout:g}s, killed" if stuck else _how_it_ended(status),
            _read_error_file(self.dump) or "no reason recorded",
            self.retry_after,
        )
        return self._failed(now)

    def _failed(self, now: float) -> int:
        self._instruments.snapshot_failures.inc()
        self._retry_at = now + self.retry_after
        return SERIALIZER_STATE.FAILED

    def _watch(self, pid: int, running_for: float, now: float) -> None:
        """A child past its time: ask for its stack, then kill it."""
        if running_for <= self.timeout:
            return
        if self._stack_asked is None:
            self._stack_asked = now
            with contextlib.suppress(OSError):
                os.kill(pid, DUMP_SIGNAL)
        elif now - self._stack_asked > DUMP_GRACE:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError):
            os.kill(child[0], signal.SIGKILL)
            os.waitpid(child[0], 0)


def _how_it_ended(status: int) -> str:
    try:
        code = os.waitstatus_to_exitcode(status)
    except ValueError:
        return f"wait status {status}"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _child_main(state: Any, raft: tuple[Any, ...], dump: str) -> NoReturn:
    """The forked child: serialize, then leave without running anything else (whatever
    happens, it never returns into the parent's code: that would be a second tick thread)."""
    status = 1
    try:
        gc.disable()
        os.closerange(3, _MAX_FD)
        try:  # where it hangs, if it does: the parent asks with DUMP_SIGNAL
            stack = open(f"{dump}.error", "w")  # noqa: SIM115 (open until os._exit)
            faulthandler.register(DUMP_SIGNAL, file=stack, all_threads=True, chain=False)
        except (OSError, RuntimeError, ValueError):
            pass
        status = write_snapshot_file(state, raft, dump)
    finally:
        os._exit(status)


def write_snapshot_file(state: Any, raft: tuple[Any, ...], dump: str) -> int:
    """In the forked child: the snapshot file, durably, at ``dump``; the exit status."""
    partial = f"{dump}.writing"
    try:
        payload = {"format": SNAPSHOT_FORMAT, "raft": raft, "state": state.snapshot()}
        with open(partial, "wb") as raw:
            paced = PacedWriter(raw)
            with gzip.GzipFile(fileobj=paced, mode="wb", compresslevel=3) as out:  # type: ignore[arg-type]
                pickle.dump(payload, out, protocol=pickle.HIGHEST_PROTOCOL)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(partial, dump)
        fsync_dir(dump)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{dump}.error")
        with open(f"{dump}.done", "w") as marker:
            marker.write(str(os.getpid()))
        return 0
    except BaseException as err:  # the child reports every failure, then exits
        with contextlib.suppress(Exception), open(f"{dump}.error", "w") as note:
            note.write(f"{type(err).__name__}: {err}"[:2000])
        return 1


FLUSH_EVERY = 4 << 20  # bytes of snapshot file written between two data flushes


class PacedWriter:
    """A binary file that flushes its data to disk every :data:`FLUSH_EVERY` bytes.

    Written whole and fsynced once, a snapshot is tens of MiB of dirty pages flushed in one
    go, and every journal fsync on the same disk (this node's and its peers': each commit
    waits for one) queues behind that flush. A few MiB at a time keeps each wait short."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._unflushed = 0

    def write(self, data: Any) -> int:
        written: int = self._raw.write(data)
        self._unflushed += written
        if self._unflushed >= FLUSH_EVERY:
            self._raw.flush()
            os.fdatasync(self._raw.fileno())
            self._unflushed = 0
        return written

    def flush(self) -> None:
        self._raw.flush()

    def __getattr__(self, name: str) -> Any:  # what else GzipFile asks of its file
        return getattr(self._raw, name)


def read_snapshot_file(path: str) -> dict[str, Any]:
    """The payload of a snapshot file; ValueError for one of an unknown format.

    Decompressed whole, then unpickled with the cyclic GC paused: unpickling allocates
    millions of containers that all stay alive, and with the GC on, its collections on the
    way walked them again and again (two thirds of the unpickling at 100,000 DAGs: 3.0 s of
    CPU instead of 1.0 s); GzipFile's small reads cost as much again as one decompress."""
    with open(path, "rb") as raw:
        compressed = raw.read()
    payload = _unpickle(gzip.decompress(compressed))
    if payload.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"unknown snapshot format {payload.get('format')!r}")
    return payload


_unpickle = without_gc(pickle.loads)


def entry_index(raft_data: Any) -> Any:
    try:
        return raft_data[0][1]
    except (IndexError, TypeError):
        return "?"


def _done_marker(dump: str) -> int | None:
    try:
        with open(f"{dump}.done") as marker:
            return int(marker.read().strip())
    except (OSError, ValueError):
        return None


def _read_error_file(dump: str) -> str:
    try:
        with open(f"{dump}.error") as note:
            return note.read().strip()
    except OSError:
        return ""


def write_starting_point(
    node_dir: Any,
    nodes: Any,
    state: dict[str, Any],
    index: int,
    *,
    term: int = 1,
    durable: bool = True,
) -> None:
    """Write a node's data files so it starts from ``state`` (a SchedulerState snapshot dict)
    at Raft log ``index`` (``raftsched cluster rebuild --from-db``): the snapshot
    (``raft.dump``, the format :func:`read_snapshot_file` reads; its raft part is pysyncobj's tuple
    ``(last applied entry, the entry before it, cluster members)``), a journal holding those two
    entries (so pysyncobj keeps it) and the meta file (term, no vote, commit index ``index``:
    nothing before it is ever replayed). ``node_dir`` must hold no other Raft files."""
    from pathlib import Path

    from pysyncobj.node import TCPNode

    from raftsched.raft.journal import DurableJournal, write_file_durably
    from raftsched.raft.settings import DUMP_FILE, JOURNAL_FILE

    directory = Path(node_dir)
    directory.mkdir(parents=True, exist_ok=True)
    noop = b"\x01"  # pysyncobj's _COMMAND_TYPE.NO_OP
    last, before = (noop, index, term), (noop, index - 1, term)
    members = {TCPNode(address) for address in nodes}
    payload = {"format": SNAPSHOT_FORMAT, "raft": (last, before, members), "state": state}
    raw = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    write_file_durably(str(directory / DUMP_FILE), gzip.compress(raw, 3), durable=durable)
    journal = DurableJournal(str(directory / JOURNAL_FILE), durable=durable)
    try:
        journal.add(*before)
        journal.add(*last)
        journal.flush()
        journal.setRaftCommitIndex(index)
        journal.setCurrentTerm(term, None)
    finally:
        journal._destroy()


def align_journal(journal: Any, raft: Any) -> None:
    """At start pysyncobj keeps the journal only if it begins with the snapshot's last two
    entries; otherwise it clears it, the entries after the snapshot included: entries this
    node acknowledged, which a majority may count on. A node stopped after its snapshot
    file was renamed into place but before the journal was compacted (the forked writer
    makes that window a tick or two) would lose them. So compact the journal up to the
    snapshot first, as the compaction that was due would have."""
    try:
        last, before = raft[0], raft[1]
        if journal is None or len(journal) < 2:
            return
        pos = int(before[1]) - int(journal[0][1])
        if pos <= 0 or pos + 1 >= len(journal):
            return
        if journal[pos] != before or journal[pos + 1] != last:
            return  # not this history: pysyncobj's own rule (clear) applies
    except (IndexError, TypeError, ValueError):
        return
    journal.deleteEntriesTo(pos)
    log.info(
        "journal compacted to the snapshot at log index %s on load (%d entries after it kept)",
        entry_index(raft),
        len(journal) - 2,
    )
