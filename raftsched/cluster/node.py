"""The scheduler node: one ``SchedulerState`` replicated by a Raft node it holds
(``self.raft``, a :class:`~raftsched.raft.node.RaftNode`), whose state machine it is.

Contract (the Raft side, proposals, roles, snapshots and handover, is ``raftsched.raft``'s;
the node answers the Raft status its callers read, ``is_leader`` to ``member_releases``, from
``self.raft``, and tools reach the rest there):

- ``submit(command, callback)`` proposes one command as ONE Raft entry (from any node: the
  Raft layer forwards a follower's command to the leader). ``callback(result, fail_reason)``
  runs on the tick thread with ``SchedulerState.apply``'s ``Result`` on success. Use
  ``raftsched.cluster.proposer.Proposer`` for timeouts and retries.
- The entry's log index is passed to apply as ``log_index``, the fencing token of leases.
- The replicated state is ``SchedulerState`` and nothing else. Snapshots are
  ``{"format", "raft", "state": state.snapshot()}``, written by a forked child while the node
  goes on applying (:mod:`raftsched.raft.snapshots`) and read back with ``restore``.
- ``read(fn)`` runs ``fn(state)`` under the lock that apply holds: other threads see the state
  between two entries, never half-way through one. Keep ``fn`` short (the tick thread waits).
- Apply listeners (``add_apply_listener``) run on the tick thread, under the state lock, after
  each command: they must only enqueue or set events. Role listeners run on the tick thread
  on every Raft state change.
- ``digest()`` returns ``(index, digest)`` taken together under the lock.
- A snapshot that cannot be read (e.g. written by a newer release) sets ``fatal_error``; the
  runtime then stops the process, and apply refuses to run on the unknown state.
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
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftsched.cluster.metrics import NodeInstruments
from raftsched.cluster.versions import ReleaseMixin
from raftsched.core.commands import Command
from raftsched.core.results import INTERNAL_ERROR, Result
from raftsched.errors import UpgradeUnfinished
from raftsched.raft.node import RaftNode, TransportFactory
from raftsched.raft.offline import write_digest_stamp
from raftsched.raft.outcomes import FailReason
from raftsched.raft.settings import RaftSettings
from raftsched.raft.transport import ContactTransport

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

log = logging.getLogger(__name__)

ApplyListener = Callable[[int, Command, Result], None]


class SchedulerNode(ReleaseMixin):
    def __init__(
        self,
        settings: RaftSettings,
        *,
        state_factory: Callable[[], SchedulerState] | None = None,
        instruments: NodeInstruments | None = None,
        transport: TransportFactory = ContactTransport,
        auto_tick: bool = True,
    ) -> None:
        """``transport`` and ``auto_tick`` go to the Raft node: a simulation gives a
        :class:`~raftsched.raft.memory_transport.MemoryNetwork`'s transport and ticks
        ``node.raft`` by hand."""
        if state_factory is None:
            from raftsched.core.state import SchedulerState

            state_factory = SchedulerState
        # Everything here is set before the Raft node starts its tick thread.
        self.settings = settings
        self._state_factory = state_factory
        self._lock = threading.RLock()
        self._state = state_factory()
        # Prometheus counters and histograms of this node (cluster/metrics.py).
        self.instruments = instruments if instruments is not None else NodeInstruments()
        self._apply_listeners: list[ApplyListener] = [self.instruments.on_apply]
        self.raft = RaftNode(
            settings,
            self,
            instruments=self.instruments,
            transport=transport,
            auto_tick=auto_tick,
        )
        self.raft.start()

    # -- the state machine -------------------------------------------------------------------

    def apply_entry(self, command: Command, log_index: int) -> Result:
        with self._lock:
            if self.raft.fatal_error is None:  # a finalized upgrade past this release: stop
                too_old = self.too_old_for(command)
                if too_old is not None:
                    self.raft.fail(too_old)  # no handover: the runtime exits
            fatal = self.raft.fatal_error
            if fatal is not None:
                raise RuntimeError(f"node stopped applying: {fatal}")
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
        if self.raft.gate_refuses(command):
            callback(None, FailReason.REQUEST_DENIED)
            return
        refusal = self.release_refusal(command)  # a mixed-release cluster (versions.py)
        if refusal is not None:
            raise UpgradeUnfinished(refusal)
        self.raft.propose(command, callback)

    @property
    def command_gate(self) -> Callable[[Command | None], str | None] | None:
        """Set by the runtime: see the module's docstring."""
        return self.raft.command_gate

    @command_gate.setter
    def command_gate(self, gate: Callable[[Command | None], str | None] | None) -> None:
        self.raft.command_gate = gate

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
    def fatal_error(self) -> str | None:
        """Why this node stopped for good (the runtime exits), or None."""
        return self.raft.fatal_error

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

    # -- snapshots (RaftNode's hooks, on the tick thread) ------------------------------------

    def snapshot_subject(self) -> tuple[SchedulerState, Any]:
        return self._state, self._lock

    def snapshot_refusal(self) -> str | None:
        # Keep the whole log: a release with the fix must be able to replay the entry that
        # stopped the state machine.
        if self.apply_error is not None:
            return f"no snapshot while the state machine is stopped: {self.apply_error}"
        return None

    def restore_state(self, data: dict[str, Any]) -> None:
        state = _restore(self._state_factory, data)
        with self._lock:
            self._state = state

    # -- the Raft node's status, as the API, the leader loop and the runtime read it ----------

    @property
    def role(self) -> str:
        return self.raft.role

    @property
    def is_leader(self) -> bool:
        return self.raft.is_leader

    @property
    def term(self) -> int:
        return self.raft.term

    @property
    def leader_address(self) -> str | None:
        return self.raft.leader_address

    @property
    def quorum(self) -> bool:
        return self.raft.quorum

    @property
    def last_leader_contact(self) -> float | None:
        return self.raft.last_leader_contact

    def peers(self) -> dict[str, bool]:
        return self.raft.peers()

    def member_releases(self) -> dict[str, int | None]:
        return self.raft.member_releases()

    def add_role_listener(self, listener: Callable[[str], None]) -> None:
        self.raft.add_role_listener(listener)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the Raft node (tick thread, sockets, journal), then record the state digest
        at the last applied entry next to the journal (what `raftsched debug replay` checks
        a replay against). Idempotent."""
        self.raft.close(timeout)
        index, digest = self.digest()
        if index > 0:
            try:
                durable = self.settings.durable_journal
                write_digest_stamp(self.settings.node_dir, index, digest, durable=durable)
            except OSError as err:  # a full disk must not stop the shutdown
                log.warning("could not record the state digest at index %d: %s", index, err)


def _restore(factory: Callable[[], SchedulerState], data: dict[str, Any]) -> SchedulerState:
    """A state restored from ``data`` (``restore`` may be a classmethod or an instance method)."""
    state = factory()
    returned = state.restore(data)
    return returned if isinstance(returned, type(state)) else state
