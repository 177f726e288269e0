"""Planned leadership changes of a scheduler node (SIGTERM on the leader, docs/architecture.md §9).

:class:`Handover` is mixed into the engine (:class:`~raftsched.raft.engine.Engine`):

- ``hand_over(timeout)``: leadership goes to the most up-to-date connected follower (pysyncobj's
  ``transferLeadership``: Raft's TimeoutNow), and the call returns once another node leads
  (bounded).
- ``_hold_first_election()``: a restarted node stands for election only once the leader had
  the time to reach it, so a rolling restart deposes nobody.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from raftsched.errors import RaftPortUnreachable
from raftsched.raft import admin_messages, clock

log = logging.getLogger("raftsched.raft.node")  # the node's logger

RESTART_HOLD = 3.0  # s a restarted node waits for the leader before it may stand
HANDOVER_RETRY = 0.02  # s between transfer requests while no follower holds every entry
HANDOVER_POLL = 0.01  # s between looks at the role while a handover runs


class Handover:
    """Mixin of the engine (uses its settings, role properties and pysyncobj state)."""

    settings: Any
    _fatal_error: str | None

    def hand_over(self, timeout: float) -> str | None:
        """Hand leadership to the most up-to-date connected follower (pysyncobj's
        ``transferLeadership``: Raft's TimeoutNow) and wait, at most ``timeout`` seconds, until
        another node leads. Returns that node's address, or None when this node does not lead,
        no follower is connected, or nobody took over in time (the others then elect a leader
        as after a crash). Call it once this node proposes nothing more: an entry appended
        after the transfer request makes the target fall behind and the request be refused.

        The request goes to this node's own Raft port as a utility message, the way
        ``cluster transfer-leader`` sends it, so it runs on the tick thread (the transport and
        the match indexes it reads belong to that thread)."""
        if timeout <= 0 or not self.is_leader or self._fatal_error is not None:
            return None
        me = self.settings.self_address
        term = self.term
        started = time.monotonic()
        deadline = started + timeout
        asked_at: float | None = None
        while True:
            now = time.monotonic()
            leader = self.leader_address
            if not self.is_leader and leader is not None and leader != me:
                log.info(
                    "handed leadership over to %s in %.3fs (term %d -> %d)",
                    leader,
                    now - started,
                    term,
                    self.term,
                )
                return leader
            if now >= deadline:
                break
            if self.is_leader:
                if not self._followers_connected():
                    log.warning("no follower connected: stopping without handing over")
                    return None
                if asked_at is None or now - asked_at >= self._handover_resend():
                    if self._ask_transfer():
                        asked_at = now
                    else:  # refused: no follower holds every entry yet; it will next heartbeat
                        asked_at = None
                        time.sleep(HANDOVER_RETRY)
                        continue
            # else an election is running (ours, normally): wait for its winner
            time.sleep(HANDOVER_POLL)
        log.warning(
            "no other node took over within %.1fs (leader now: %s); stopping anyway",
            timeout,
            self.leader_address,
        )
        return None

    def _hold_first_election(self) -> None:
        """A restarted node (its journal has a term) stands for election only once the leader
        had the time to reach it: ``connection_retry_time + raft_max_timeout``.

        pysyncobj has no pre-vote, and between two nodes only the one with the greater address
        opens the connection; the other waits for its retry (``connection_retry_time``). A node
        restarted in a rolling restart is often connected to a follower before the leader
        reaches it, so its first election timeout (0.15-0.45 s) ran out, it stood at term + 1
        and deposed a healthy leader: one election per restarted node in the rolling-restart
        bench. Waiting costs nothing while a leader exists (its first heartbeat resets the
        timer) and delays a full-cluster restart's first election by at most that much. A
        fresh cluster (term 0) elects at once. At least :data:`RESTART_HOLD` s: at load 12 on
        two cores a restarted node reached its first election check 2.2 s after start with
        the leader's heartbeats not yet handled (CI log), and stood."""
        if self.term <= 0:
            return
        hold = max(
            RESTART_HOLD, self.settings.connection_retry_time + self.settings.raft_max_timeout
        )
        attribute = "_SyncObj__raftElectionDeadline"
        if not hasattr(self, attribute):  # another pysyncobj: keep its own behaviour
            log.warning("pysyncobj has no %s: a restarted node may force an election", attribute)
            return
        # The tick thread compares this float with the clock; it reaches its first election
        # check no earlier than raft_min_timeout after __init__, so there is no race here.
        setattr(self, attribute, max(getattr(self, attribute), clock.now() + hold))

    def _handover_resend(self) -> float:
        # The target stands at once on TimeoutNow and wins within a round trip; a leader still
        # leading after two minimum election timeouts asks again (the target may have died).
        return 2 * self.settings.raft_min_timeout

    def _followers_connected(self) -> bool:
        try:
            return any(self.isNodeConnected(node) for node in list(self.otherNodes))
        except RuntimeError:  # the tick thread changed the set meanwhile
            return True

    def _ask_transfer(self) -> bool:
        me = self.settings.self_address
        try:
            answer = admin_messages.send(me, self.settings.secret, ["transfer", ""], timeout=1.0)
        except RaftPortUnreachable as err:
            log.debug("transfer request not answered: %s", err)
            return False
        return answer.startswith("SUCCESS")

    # -- lifecycle ---------------------------------------------------------------------------
