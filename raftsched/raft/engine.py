"""The engine under :class:`~raftsched.raft.node.RaftNode`: pysyncobj's ``SyncObj``, patched.

Private to ``raftsched.raft``: only :mod:`raftsched.raft.node` builds one. This is the one
class that reaches into pysyncobj's private state (``_SyncObj__*``); the patches themselves are
mixins of their own modules (:mod:`~raftsched.raft.group_commit`,
:mod:`~raftsched.raft.handover`, :mod:`~raftsched.raft.releases`) and the transport
(:mod:`~raftsched.raft.transport`). Its one replicated method hands each committed command to
the state machine (``fsm.apply_entry``); its snapshot hooks call ``fsm.snapshot_subject``,
``fsm.snapshot_refusal`` and ``fsm.restore_state`` (all on the tick thread).
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from pysyncobj import SyncObj, replicated

from raftsched.raft.group_commit import DurableTicks
from raftsched.raft.handover import Handover
from raftsched.raft.outcomes import FailReason, Role, role_name
from raftsched.raft.releases import ReleaseReports
from raftsched.raft.settings import RaftSettings, build_conf
from raftsched.raft.snapshots import (
    ForkedSnapshotWriter,
    align_journal,
    entry_index,
    read_snapshot_file,
)
from raftsched.raft.transport import _REGULAR, ContactTransport, register_journal

log = logging.getLogger("raftsched.raft.node")  # the node's one logger

RoleListener = Callable[[str], None]
MessageFilter = Callable[[Any, Any, Callable[[Any, Any], None]], None]
# pysyncobj's transportClass: (engine, this node, the other nodes) -> a Transport
TransportFactory = Callable[[Any, Any, Any], Any]


class StateMachine(Protocol):
    """What a :class:`~raftsched.raft.node.RaftNode` applies entries to (the package's
    contract); every method runs on the tick thread."""

    def apply_entry(self, command: Any, log_index: int) -> Any: ...

    def snapshot_subject(self) -> tuple[Any, Any]: ...

    def snapshot_refusal(self) -> str | None: ...

    def restore_state(self, data: dict[str, Any]) -> None: ...


class RaftInstruments(Protocol):
    """What the node and its snapshot writer record (``cluster/instruments.NodeInstruments``)."""

    snapshot_pause: Any
    snapshot_duration: Any
    snapshot_failures: Any

    def note_leader(self, term: int) -> None: ...


class Fatal:
    """Why the node stopped for good (None while it runs): shared by the engine and its
    RaftNode, and set before the tick thread starts."""

    reason: str | None = None


class Engine(Handover, DurableTicks, ReleaseReports, SyncObj):
    def __init__(
        self,
        settings: RaftSettings,
        fsm: StateMachine,
        *,
        instruments: RaftInstruments,
        fatal: Fatal,
        transport: TransportFactory = ContactTransport,
        auto_tick: bool = True,
    ) -> None:
        # Everything here is set before SyncObj.__init__ starts the tick thread.
        settings.node_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self._fsm = fsm
        self.raft_instruments = instruments
        self._role_listeners: list[RoleListener] = []
        self._role_lock = threading.Lock()
        self._last_leader_contact: float | None = None
        self._fatal = fatal
        self._closed = False
        self.command_gate: Callable[[Any], str | None] | None = None
        self._init_releases()  # members' releases, heard by the transport (raft/releases.py)
        register_journal(str(settings.journal_file), settings.durable_journal)
        conf = build_conf(
            settings,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            on_state_changed=self._on_state_changed,
        )
        # Snapshots are written by a forked child; pysyncobj polls this for its outcome.
        conf.serializeChecker = self._snapshot_progress
        conf.autoTick = auto_tick  # off: the caller ticks (raft/memory_transport.py)
        self._snapshots = ForkedSnapshotWriter(str(settings.dump_file), instruments)
        super().__init__(
            settings.self_address,
            list(settings.partners),
            conf,
            transportClass=transport,
        )
        self._hold_first_election()

    # -- proposals ---------------------------------------------------------------------------

    @replicated
    def _apply_command(self, command: Any) -> Any:
        return self._fsm.apply_entry(command, self.raftLastApplied + 1)

    def propose(self, command: Any, callback: Callable[[Any, int], None]) -> None:
        """Propose ``command`` as one entry; ``callback(result, FailReason)`` runs on the tick
        thread. Refused at once (REQUEST_DENIED) while ``command_gate`` names a reason."""
        if self.gate_refuses(command):
            callback(None, FailReason.REQUEST_DENIED)
            return
        self._apply_command(command, callback=callback)

    def gate_refuses(self, command: Any) -> bool:
        gate = self.command_gate
        if gate is None:
            return False
        try:
            return gate(command) is not None
        except Exception:
            log.exception("command gate failed")
            return False

    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:
        # pysyncobj gives a follower's forwarded command to the leader's SyncObj here, as its
        # pickled bytes with commandType None: without this, the gate would stop only the
        # commands proposed on the leader itself.
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
            if inner is not None and self.gate_refuses(inner):
                self._SyncObj__callErrCallback(FailReason.REQUEST_DENIED, callback)  # type: ignore[attr-defined]
                return
        super()._applyCommand(command, callback, commandType)

    # -- what the node knows -----------------------------------------------------------------

    @property
    def role(self) -> str:
        return role_name(self._SyncObj__raftState)  # type: ignore[attr-defined]

    @property
    def is_leader(self) -> bool:
        return self._isLeader()

    @property
    def term(self) -> int:
        return int(self.raftCurrentTerm)

    @property
    def commit_index(self) -> int:
        return int(self.raftCommitIndex)

    @property
    def last_applied(self) -> int:
        """The Raft index of the last entry applied (pysyncobj's no-op entries included)."""
        return int(self.raftLastApplied)

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

    def peers(self) -> dict[str, bool]:
        """Raft address of every other member (sorted) -> connected to this node now."""
        for _ in range(5):  # the tick thread may change the sets meanwhile
            try:
                return {
                    str(getattr(peer, "address", None) or peer.id): bool(self.isNodeConnected(peer))
                    for peer in sorted(self.otherNodes, key=lambda n: n.id)
                }
            except RuntimeError:
                continue
        return {}

    @property
    def last_leader_contact(self) -> float | None:
        """Unix time the leader last reached this node (now, if this node leads)."""
        if self._isLeader():
            return time.time()
        return self._last_leader_contact

    @property
    def _fatal_error(self) -> str | None:  # (what Handover reads)
        return self._fatal.reason

    def add_tick_callback(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs on the tick thread at every tick (keep it short)."""
        self.addOnTickCallback(callback)

    def filter_received(self, wrap: MessageFilter) -> None:
        """Every Raft message this node receives goes through ``wrap(peer, message, deliver)``
        first, on the tick thread (a test hook: a lagging replica)."""
        transport = self._SyncObj__transport  # type: ignore[attr-defined]
        inner = transport._onMessageReceivedCallback
        transport._onMessageReceivedCallback = lambda peer, message: wrap(peer, message, inner)

    # -- role events -------------------------------------------------------------------------

    def add_role_listener(self, listener: RoleListener) -> None:
        with self._role_lock:
            self._role_listeners.append(listener)

    def _on_state_changed(self, old: int, new: int) -> None:
        role = role_name(new)
        log.info(
            "raft role %s -> %s (term %d, leader %s)",
            role_name(old),
            role,
            self.raftCurrentTerm,
            self.leader_address,
        )
        if new == Role.LEADER:
            self.raft_instruments.note_leader(int(self.raftCurrentTerm))
        with self._role_lock:
            listeners = list(self._role_listeners)
        for listener in listeners:
            try:
                listener(role)
            except Exception:
                log.exception("role listener failed")

    def _note_leader_contact(self) -> None:
        self._last_leader_contact = time.time()
        self.raft_instruments.note_leader(int(self.raftCurrentTerm))

    # -- snapshots (called by pysyncobj on the tick thread) ----------------------------------

    def _write_snapshot(self, filename: str, raft_data: Any) -> None:
        """Start writing a snapshot of the state as it is now (a forked child: see
        :mod:`raftsched.raft.snapshots`) and return at once; ``filename`` is pysyncobj's
        temporary path."""
        refusal = self._fsm.snapshot_refusal()
        if refusal is not None:  # pysyncobj retries compaction later
            self._snapshots.refuse(refusal)
        state, lock = self._fsm.snapshot_subject()
        self._snapshots.start(state, tuple(raft_data), lock, filename)

    def _snapshot_progress(self) -> int:
        """pysyncobj's ``serializeChecker``: where the forked snapshot writer is."""
        return self._snapshots.progress()

    def _read_snapshot(self, filename: str) -> tuple[Any, ...]:
        try:
            payload = read_snapshot_file(filename)
            self._fsm.restore_state(payload["state"])
        except Exception as err:
            self._fatal.reason = f"cannot load snapshot {filename}: {err}"
            log.critical("%s", self._fatal.reason)
            raise
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
        thread = getattr(self, "_SyncObj__thread", None)  # none without auto_tick
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
