"""Which release each member runs, as heard in its Raft messages (rolling upgrades, §12).

Every Raft message a node sends carries its release (:data:`~raftsched.raft.transport.RELEASE_KEY`,
added by ``ContactTransport.send``); a node of release 1 adds nothing, and pysyncobj ignores
keys it does not read, so the previous release neither sees nor minds it. The receiving
transport notes the sender's release (:meth:`ReleaseReports._note_release`). Only the leader
hears from every member (followers answer its heartbeats every 40 ms), so its
:meth:`ReleaseReports.member_releases` is the cluster's picture: a member not heard from in
:data:`REPORT_TTL` seconds is unknown. What a node does with the picture (the proposal gate,
finalization) is the scheduler's business: ``raftsched/cluster/versions.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from raftsched.core import versions as vs
from raftsched.raft.transport import RELEASE_KEY

log = logging.getLogger(__name__)

REPORT_TTL = 3.0  # seconds a member's last report counts (followers answer every 40 ms)


class ReleaseReports:
    """Mixin of :class:`~raftsched.raft.node.RaftNode` (uses its ``peers`` and ``settings``)."""

    _release_lock: threading.Lock
    _releases: dict[str, tuple[int, float]]

    def _init_releases(self) -> None:
        self._release_lock = threading.Lock()
        self._releases = {}
        self._warned_older: set[str] = set()

    def _note_release(self, node: Any, message: dict[str, Any]) -> None:
        """The transport got ``message`` from ``node``: note the release it runs."""
        if RELEASE_KEY not in message and message.get("type") == "keepalive":
            # the transport's keepalive goes out as is, without a release (0.2.0's too);
            # it says nothing about the sender's release
            return
        address = str(getattr(node, "address", None) or getattr(node, "id", node))
        release = message.get(RELEASE_KEY, vs.FIRST_RELEASE)  # release 1 sends none
        if not isinstance(release, int) or isinstance(release, bool):
            release = vs.FIRST_RELEASE
        with self._release_lock:
            self._releases[address] = (release, time.monotonic())
        if release < vs.BASELINE_RELEASE and address not in self._warned_older:
            self._warned_older.add(address)
            log.error("%s", vs.older_than_baseline_hint({address: release}))

    def older_than_baseline(self) -> dict[str, int]:
        """Nodes heard from within REPORT_TTL that run a release older than the baseline."""
        now = time.monotonic()
        with self._release_lock:
            reports = dict(self._releases)
        return {
            a: r
            for a, (r, at) in reports.items()
            if r < vs.BASELINE_RELEASE and now - at <= REPORT_TTL
        }

    def member_releases(self) -> dict[str, int | None]:
        """Raft address of every member -> its release as last reported within REPORT_TTL
        (None: not heard from; only a leader hears from every member)."""
        out: dict[str, int | None] = {self.settings.self_address: vs.RELEASE}  # type: ignore[attr-defined]
        now = time.monotonic()
        with self._release_lock:
            reports = dict(self._releases)
        for address in self.peers():  # type: ignore[attr-defined]
            release, at = reports.get(address, (None, 0.0))
            out[address] = release if now - at <= REPORT_TTL else None
        return out
