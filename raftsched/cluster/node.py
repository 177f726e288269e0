"""The scheduler node: a pysyncobj ``SyncObj`` whose one replicated method applies a command.

Contract:

- ``submit(command, callback)`` proposes one command as ONE Raft entry (from any node:
  pysyncobj forwards a follower's command to the leader). ``callback(result, fail_reason)``
  runs on the tick thread with ``SchedulerState.apply``'s ``Result`` on success. Use
  ``raftsched.cluster.proposer.Proposer`` for timeouts and retries.
- Inside the replicated method the entry's log index is ``raftLastApplied + 1`` (pysyncobj
  increments it after the method returns); it is passed to apply as ``log_index``, the
  fencing token of leases.
- The replicated state is ``SchedulerState`` and nothing else. Snapshots are
  ``{"format", "raft", "state": state.snapshot()}``, written by a forked child while the node
  goes on applying (:mod:`raftsched.cluster.snapshots`) and read back with ``restore``;
  pysyncobj pickles none of ``self.__dict__`` (custom serializer). The transport and the
  journal hooks are :mod:`raftsched.cluster.transport`; planned handover is
  :mod:`raftsched.cluster.handover`.
- ``read(fn)`` runs ``fn(state)`` under the lock that apply holds: other threads see the state
  between two entries, never half-way through one. Keep ``fn`` short (the tick thread waits).
- Apply listeners (``add_apply_listener``) run on the tick thread, under the state lock, after
  each command: they must only enqueue or set events. Role listeners run on the tick thread
  on every Raft state change.
- ``digest()`` returns ``(index, digest)`` taken together under the lock.
- A snapshot that cannot be read (e.g. written by a newer release) sets ``fatal_error``; the
  runtime then stops the process, and apply refuses to run on the unknown state.
- The Raft journal is ``raftsched.cluster.journal.DurableJournal`` (pysyncobj's
  ``createJournal`` is redirected for this node's journal path). Group commit on the
  journal's own fsync thread (:mod:`raftsched.cluster.group_commit`): the tick thread never
  waits for the disk; the transport holds append-entries acknowledgements (``next_node_idx``)
  until the journal's ``durable_index`` covers them, and a leader counts itself towards a
  commit only up to it. So a follower acknowledges only entries on disk, and the leader counts
  itself only for entries on disk. Term and vote are fsynced before the vote leaves (the
  journal stores them synchronously). ``durable_journal=False`` skips the fsyncs (and holds
  nothing back).
- ``command_gate`` (set by the runtime): while it returns a reason for a command, this node
  refuses that command with ``REQUEST_DENIED`` when it is proposed here or forwarded to this
  node as leader (the materializer's DB/log mismatch check stops leases and new runs).
  ``command_gate(None)`` is None while the gate refuses nothing (forwarded commands are then
  not decoded).
- Rolling upgrades (:mod:`raftsched.cluster.versions`): ``submit`` raises
  ``UpgradeUnfinished`` for a command a node of the cluster version's older release could
  not apply alike; applying a ``SetClusterVersion`` past this release is a fatal error.
- A command that makes a handler raise (a bug: apply is total for every input) stops the state
  machine at that entry on every replica (``apply_error``): later entries change nothing, the
  node keeps serving reads and status, logs the command once, and writes no snapshot, so the
  log that a fixed release must replay is kept.
- ``hand_over(timeout)`` (the runtime's stop on a leader): leadership goes to the most
  up-to-date connected follower, and the call returns once another node leads (bounded).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pysyncobj import FAIL_REASON, SyncObj, replicated

from raftsched.cluster.group_commit import DurableTicks
from raftsched.cluster.handover import Handover
from raftsched.cluster.metrics import NodeInstruments
from raftsched.cluster.settings import RaftSettings, build_conf
from raftsched.cluster.snapshots import (
    ForkedSnapshotWriter,
    align_journal,
    entry_index,
    read_snapshot_file,
)
from raftsched.cluster.transport import (
    _REGULAR,
    ContactTransport,
    register_journal,
)
from raftsched.cluster.versions import ReleaseMixin
from raftsched.core.commands import Command
from raftsched.core.results import INTERNAL_ERROR, Result
from raftsched.errors import UpgradeUnfinished

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

log = logging.getLogger(__name__)

ROLES = {0: "follower", 1: "candidate", 2: "leader"}

ApplyListener = Callable[[int, Command, Result], None]
RoleListener = Callable[[str], None]


class SchedulerNode(Handover, DurableTicks, ReleaseMixin, SyncObj):
    def __init__(
        self,
        settings: RaftSettings,
        *,
        state_factory: Callable[[], SchedulerState] | None = None,
        instruments: NodeInstruments | None = None,
    ) -> None:
        if state_factory is None:
            from raftsched.core.state import SchedulerState

            state_factory = SchedulerState
        # Everything here is set before SyncObj.__init__ starts the tick thread.
        settings.node_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self._state_factory = state_factory
        self._lock = threading.RLock()
        self._state = state_factory()
        # Prometheus counters and histograms of this node (cluster/metrics.py).
        self.instruments = instruments if instruments is not None else NodeInstruments()
        self._apply_listeners: list[ApplyListener] = [self.instruments.on_apply]
        self._role_listeners: list[RoleListener] = []
        self._role_cond = threading.Condition()
        self._role_seq = 0
        self._last_leader_contact: float | None = None
        self._fatal_error: str | None = None
        self._closed = False
        self.command_gate: Callable[[Command], str | None] | None = None
        self._init_releases()  # members' releases, heard by the transport (cluster/versions.py)
        register_journal(str(settings.journal_file), settings.durable_journal)
        conf = build_conf(
            settings,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            on_state_changed=self._on_state_changed,
        )
        # Snapshots are written by a forked child; pysyncobj polls this for its outcome.
        conf.serializeChecker = self._snapshot_progress
        self._snapshots = ForkedSnapshotWriter(str(settings.dump_file), self.instruments)
        super().__init__(
            settings.self_address,
            list(settings.partners),
            conf,
            transportClass=ContactTransport,
        )
        self._hold_first_election()

    # -- the replicated method ---------------------------------------------------------------

    @replicated
    def _apply_command(self, command: Command) -> Result:
        log_index = self.raftLastApplied + 1
        with self._lock:
            if self._fatal_error is None:  # a finalized upgrade past this release: stop here
                self._fatal_error = self.too_old_for(command)
            if self._fatal_error is not None:
                raise RuntimeError(f"node stopped applying: {self._fatal_error}")
            started = time.perf_counter()
            try:
                result = self._state.apply(command, log_index=log_index)
            except Exception:  # apply must not raise; if it does, every replica does the same
                log.exception("apply raised at log index %d (%s)", log_index, type(command))
                result = Result(ok=False, reason=INTERNAL_ERROR)
            self.instruments.apply_latency.observe(time.perf_counter() - started)
            if result.reason == INTERNAL_ERROR:
                log.critical(
                    "the state machine stopped applying at log index %d: %s; command: %.2000r."
                    " This is a bug in raftsched: every replica stops at the same entry. Keep"
                    " the data directories and report it; a release with the fix replays the log",
                    log_index,
                    self._state.halted,
                    command,
                )
            for listener in self._apply_listeners:
                try:
                    listener(log_index, command, result)
                except Exception:
                    log.exception("apply listener failed")
        return result

    def submit(self, command: Command, callback: Callable[[Any, int], None]) -> None:
        """Propose ``command``; ``callback(result, fail_reason)`` runs on the tick thread."""
        if self._gate_refuses(command):
            callback(None, FAIL_REASON.REQUEST_DENIED)
            return
        refusal = self.release_refusal(command)  # a mixed-release cluster (cluster/versions.py)
        if refusal is not None:
            raise UpgradeUnfinished(refusal)
        self._apply_command(command, callback=callback)

    def _gate_refuses(self, command: Any) -> bool:
        gate = self.command_gate
        if gate is None:
            return False
        try:
            return gate(command) is not None
        except Exception:
            log.exception("command gate failed")
            return False

    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:
        # A command forwarded by a follower arrives here as bytes with commandType None.
        gate = self.command_gate
        if (
            gate is not None
            and commandType is None
            and gate(None) is not None  # the gate is closed for something: look closer
            and isinstance(command, bytes)
            and command[:1] == _REGULAR
        ):
            try:
                decoded = pickle.loads(command[1:])
                args = decoded[1] if isinstance(decoded, tuple) and len(decoded) > 1 else ()
                inner = args[0] if args else None
            except Exception:
                inner = None
            if inner is not None and self._gate_refuses(inner):
                self._SyncObj__callErrCallback(FAIL_REASON.REQUEST_DENIED, callback)  # type: ignore[attr-defined]
                return
        super()._applyCommand(command, callback, commandType)

    # -- reads -------------------------------------------------------------------------------

    def read(self, fn: Callable[[SchedulerState], Any]) -> Any:
        with self._lock:
            return fn(self._state)

    @property
    def applied_index(self) -> int:
        """The index of the last command applied, read without the lock: an int attribute of
        the current state object (one read, atomic). Stamps every API answer's freshness."""
        return int(self._state.applied_index)

    def digest(self) -> tuple[int, str]:
        """(applied index of the state, its digest), taken atomically."""
        with self._lock:
            return int(self._state.applied_index), self._state.digest()

    @property
    def role(self) -> str:
        return ROLES.get(self._SyncObj__raftState, "unknown")  # type: ignore[attr-defined]

    @property
    def is_leader(self) -> bool:
        return self._isLeader()

    @property
    def term(self) -> int:
        return int(self.raftCurrentTerm)

    @property
    def leader_address(self) -> str | None:
        leader = self._getLeader()
        if leader is None:
            return None
        return str(getattr(leader, "address", None) or leader.id)

    @property
    def quorum(self) -> bool:
        for _ in range(5):  # the tick thread may change the connected set meanwhile
            try:
                return bool(self.hasQuorum)
            except RuntimeError:
                continue
        return False

    @property
    def last_leader_contact(self) -> float | None:
        """Unix time the leader last reached this node (now, if this node leads)."""
        if self._isLeader():
            return time.time()
        return self._last_leader_contact

    @property
    def fatal_error(self) -> str | None:
        return self._fatal_error

    @property
    def apply_error(self) -> str | None:
        """Why the state machine stopped applying (a bug), or None while it applies."""
        return getattr(self._state, "halted", None)

    # -- listeners ---------------------------------------------------------------------------

    def add_apply_listener(self, listener: ApplyListener) -> None:
        with self._lock:
            self._apply_listeners.append(listener)

    def remove_apply_listener(self, listener: ApplyListener) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._apply_listeners.remove(listener)

    def add_role_listener(self, listener: RoleListener) -> None:
        with self._role_cond:
            self._role_listeners.append(listener)

    def wait_role_change(self, seen: int, timeout: float) -> int:
        """Block until the role changed since sequence number ``seen`` (or timeout); return
        the current sequence number. Start with ``seen=role_seq``."""
        with self._role_cond:
            self._role_cond.wait_for(lambda: self._role_seq != seen, timeout)
            return self._role_seq

    @property
    def role_seq(self) -> int:
        with self._role_cond:
            return self._role_seq

    def _on_state_changed(self, old: int, new: int) -> None:
        role = ROLES.get(new, str(new))
        log.info(
            "raft role %s -> %s (term %d, leader %s)",
            ROLES.get(old, old),
            role,
            self.raftCurrentTerm,
            self.leader_address,
        )
        if role == "leader":
            self.instruments.note_leader(int(self.raftCurrentTerm))
        with self._role_cond:
            self._role_seq += 1
            listeners = list(self._role_listeners)
            self._role_cond.notify_all()
        for listener in listeners:
            try:
                listener(role)
            except Exception:
                log.exception("role listener failed")

    def _note_leader_contact(self) -> None:
        self._last_leader_contact = time.time()
        self.instruments.note_leader(int(self.raftCurrentTerm))

    # -- snapshots (called by pysyncobj on the tick thread) ----------------------------------

    def _write_snapshot(self, filename: str, raft_data: Any) -> None:
        """Start writing a snapshot of the state as it is now (a forked child: see
        :mod:`raftsched.cluster.snapshots`) and return at once; ``filename`` is pysyncobj's
        temporary path."""
        if self.apply_error is not None:
            # Keep the whole log: a release with the fix must be able to replay the entry
            # that stopped the state machine (pysyncobj retries compaction later).
            self._snapshots.refuse(
                f"no snapshot while the state machine is stopped: {self.apply_error}"
            )
        self._snapshots.start(self._state, tuple(raft_data), self._lock, filename)

    def _snapshot_progress(self) -> int:
        """pysyncobj's ``serializeChecker``: where the forked snapshot writer is."""
        return self._snapshots.progress()

    def _read_snapshot(self, filename: str) -> tuple[Any, ...]:
        try:
            payload = read_snapshot_file(filename)
            state = _restore(self._state_factory, payload["state"])
        except Exception as err:
            self._fatal_error = f"cannot load snapshot {filename}: {err}"
            log.critical("%s", self._fatal_error)
            raise
        with self._lock:
            self._state = state
        align_journal(getattr(self, "_SyncObj__raftLog", None), payload["raft"])
        log.info("snapshot loaded at log index %s", entry_index(payload["raft"]))
        return tuple(payload["raft"])

    def close(self, timeout: float = 5.0) -> None:
        """Stop the tick thread, close sockets and the journal. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.destroy()
        self._snapshots.stop()
        thread = self._SyncObj__thread  # type: ignore[attr-defined]
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _restore(factory: Callable[[], SchedulerState], data: dict[str, Any]) -> SchedulerState:
    """A state restored from ``data`` (``restore`` may be a classmethod or an instance method)."""
    state = factory()
    returned = state.restore(data)
    return returned if isinstance(returned, type(state)) else state
