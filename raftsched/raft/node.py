"""``RaftNode``: one member of a Raft cluster, built by composition (the package's contract).

``RaftNode(settings, fsm, instruments=...)`` is the only way raftsched uses Raft. It owns a
private pysyncobj ``SyncObj`` (:class:`~raftsched.raft.engine.Engine`, where every patch
and every reach-in lives) and answers only through the methods below; nothing of pysyncobj
leaks through them (roles are names, failure reasons are
:class:`~raftsched.raft.outcomes.FailReason`).

``fsm`` is the state machine (:class:`~raftsched.raft.engine.StateMachine`): entries,
snapshots and restores reach it on the tick thread. ``start()`` starts the tick thread (and
may replay the journal into ``fsm`` at once), so whatever ``fsm`` needs must exist before it.
Everything here may be called from any thread once started, except where a method says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftsched.raft.engine import (
    Engine,
    Fatal,
    MessageFilter,
    RaftInstruments,
    StateMachine,
    TransportFactory,
)
from raftsched.raft.settings import RaftSettings
from raftsched.raft.transport import ContactTransport


class RaftNode:
    def __init__(
        self,
        settings: RaftSettings,
        fsm: StateMachine,
        *,
        instruments: RaftInstruments,
        transport: TransportFactory = ContactTransport,
        auto_tick: bool = True,
    ) -> None:
        """``transport``: pysyncobj's TCP with our patches, or a
        :class:`~raftsched.raft.memory_transport.MemoryNetwork`'s ``transport``.
        ``auto_tick=False``: no tick thread; the caller calls :meth:`tick`."""
        self.settings = settings
        self._fsm = fsm
        self._instruments = instruments
        self._transport = transport
        self._auto_tick = auto_tick
        self._fatal = Fatal()
        self._engine: Engine | None = None

    def start(self) -> None:
        """Open the journal, load the last snapshot, start the tick thread (once)."""
        if self._engine is None:
            self._engine = Engine(
                self.settings,
                self._fsm,
                instruments=self._instruments,
                fatal=self._fatal,
                transport=self._transport,
                auto_tick=self._auto_tick,
            )

    def tick(self) -> None:
        """One tick, without waiting (only with ``auto_tick=False``): read what arrived,
        stand or step down if a deadline passed, send, apply what committed."""
        self._started.doTick(0.0)

    @property
    def _started(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the Raft node is not started")
        return self._engine

    # -- proposals ---------------------------------------------------------------------------

    def propose(self, command: Any, callback: Callable[[Any, int], None]) -> None:
        """Append ``command`` as one entry; ``callback(result, FailReason)`` runs once on the
        tick thread (the contract says what each reason means, and that it can be lost)."""
        self._started.propose(command, callback)

    def propose_all(self, commands: list[Any], callback: Callable[[Any, int], None]) -> None:
        """Propose each of ``commands`` in order, one entry each (the same callback for all)."""
        for command in commands:
            self.propose(command, callback)

    @property
    def command_gate(self) -> Callable[[Any], str | None] | None:
        """While it returns a reason for a command, the command is refused (REQUEST_DENIED)
        when it is proposed here or forwarded to this node as leader. ``gate(None)`` is None
        while it refuses nothing (forwarded commands are then not decoded)."""
        return self._started.command_gate

    @command_gate.setter
    def command_gate(self, gate: Callable[[Any], str | None] | None) -> None:
        self._started.command_gate = gate

    def gate_refuses(self, command: Any) -> bool:
        return self._started.gate_refuses(command)

    # -- what the node knows -----------------------------------------------------------------

    @property
    def role(self) -> str:
        """ "follower", "candidate" or "leader"."""
        return self._started.role

    @property
    def is_leader(self) -> bool:
        """This node believes it leads (possibly with another: act only on commits)."""
        return self._started.is_leader

    @property
    def term(self) -> int:
        return self._started.term

    @property
    def leader_address(self) -> str | None:
        return self._started.leader_address

    @property
    def quorum(self) -> bool:
        return self._started.quorum

    @property
    def commit_index(self) -> int:
        return self._started.commit_index

    @property
    def last_applied(self) -> int:
        """Raft index of the last entry applied (the Raft layer's own no-op entries too)."""
        return self._started.last_applied

    @property
    def last_leader_contact(self) -> float | None:
        """Unix time the leader last reached this node (now, if this node leads)."""
        return self._started.last_leader_contact

    def peers(self) -> dict[str, bool]:
        """Raft address of every other member (sorted) -> connected to this node now."""
        return self._started.peers()

    def member_releases(self) -> dict[str, int | None]:
        """Raft address of every member -> the release it last reported (None: unknown)."""
        return self._started.member_releases()

    def older_than_baseline(self) -> dict[str, int]:
        """Members heard from lately that run a release older than the upgrade gate's
        baseline (they must be upgraded to it first)."""
        return self._started.older_than_baseline()

    @property
    def fatal_error(self) -> str | None:
        """Why this node stopped for good (a snapshot it cannot load, ``fail``), or None."""
        return self._fatal.reason

    def fail(self, reason: str) -> None:
        """Stop for good (the first reason stays): no handover, the runtime exits."""
        if self._fatal.reason is None:
            self._fatal.reason = reason

    @property
    def journal(self) -> Any:
        """The Raft log (:class:`~raftsched.raft.journal.DurableJournal`): tests and tools."""
        return self._started.journal

    # -- events ------------------------------------------------------------------------------

    def add_role_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(role)`` runs on the tick thread at every role change."""
        self._started.add_role_listener(listener)

    def add_tick_callback(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs on the tick thread at every tick (keep it short)."""
        self._started.add_tick_callback(callback)

    def remove_tick_callback(self, callback: Callable[[], None]) -> None:
        self._started.removeOnTickCallback(callback)

    def filter_received(self, wrap: MessageFilter) -> None:
        """Every Raft message received goes through ``wrap(peer, message, deliver)`` first
        (tick thread; a test hook: a lagging replica)."""
        self._started.filter_received(wrap)

    # -- membership, leadership, snapshots, lifecycle ----------------------------------------

    def add_member(self, address: str, callback: Callable[[Any, int], None]) -> None:
        """Start adding ``address`` (one change at a time; see raft/membership.py)."""
        self._started.addNodeToCluster(address, callback=callback)

    def remove_member(self, address: str, callback: Callable[[Any, int], None]) -> None:
        self._started.removeNodeFromCluster(address, callback=callback)

    def hand_over(self, timeout: float) -> str | None:
        """Hand leadership to the most up-to-date connected follower; the new leader's
        address, or None (see raft/handover.py)."""
        return self._started.hand_over(timeout)

    @property
    def snapshot_writer(self) -> Any:
        """The forked snapshot writer (:class:`~raftsched.raft.snapshots.ForkedSnapshotWriter`:
        its ``timeout``, ``retry_after``, ``running``): tests and tools."""
        return self._started._snapshots

    def force_compaction(self) -> None:
        """Write a snapshot and compact the log at the next tick (tests, tools)."""
        self._started.forceLogCompaction()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the tick thread, close sockets and the journal. Idempotent."""
        if self._engine is not None:
            self._engine.close(timeout)
