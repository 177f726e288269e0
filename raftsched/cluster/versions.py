"""Rolling upgrades on a node: the proposal gate and finalization (§12).

- **Reports.** Which release each member runs is heard by the Raft layer
  (:class:`~raftsched.raft.releases.ReleaseReports`, ``member_releases()``): the leader's
  picture is the cluster's.
- **Gate.** ``SchedulerNode.submit`` (every proposal of this node passes there) asks
  :meth:`ReleaseMixin.release_refusal`: while the committed ``cluster_version`` is older
  than this release, a command that a node of that release could not apply identically is
  refused with :class:`~raftsched.errors.UpgradeUnfinished` (FAILED_PRECONDITION), see
  ``core/versions.py``. ``SetClusterVersion`` itself passes only when every member reported
  a release at least that new.
- **Finalization.** The leader loop calls :meth:`Finalizer.maybe_finalize` after each tick:
  at most once per :data:`FINALIZE_CHECK_INTERVAL`, if the cluster version is older than
  this release and every member (in the current membership) reported this release or newer,
  it proposes ``SetClusterVersion(RELEASE)``. From that entry on, a node of the previous
  release cannot apply the log (its pysyncobj cannot unpickle the command and stops applying
  at it, logging the error on every tick) nor load a snapshot (schema version 4): rolling
  back is no longer possible, as the README says.
- **Older than the baseline.** This release describes only the previous one
  (``BASELINE_RELEASE``); a cluster of release 1 (0.1.0: cluster version 1, nodes that
  report no release) must be upgraded to it first. While the cluster version is older than
  the baseline and this node heard from such a member within :data:`REPORT_TTL`, it
  proposes nothing (:class:`~raftsched.errors.UpgradeUnfinished`, "upgrade every node to
  0.2.0 first") and logs it as an error; the finalizer never raises the version past such a
  member either. (A fresh cluster also starts at version 1: without such a member, the gate
  is the baseline's.)
- **Too old.** A node that applies a ``SetClusterVersion`` newer than its own release (a
  rollback after finalization, from a later release than this one) stops with a fatal error
  instead of applying a log it cannot follow.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from raftsched.core import versions as vs
from raftsched.core.commands import Command, SetClusterVersion
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.errors import ReleaseTooOld

log = logging.getLogger(__name__)

FINALIZE_CHECK_INTERVAL = 1.0


class ReleaseMixin:
    """The release gate of a ``SchedulerNode`` (uses its ``read`` and, from the Raft node,
    ``member_releases``)."""

    # Set once the committed cluster version reached this release: it is never lowered,
    # so from then on the gate lets everything through without reading the state.
    _finalized = False

    @property
    def cluster_version(self) -> int:
        return int(self.read(lambda st: getattr(st, "cluster_version", vs.FIRST_RELEASE)))  # type: ignore[attr-defined]

    def release_refusal(self, command: Command) -> str | None:
        """Why this node must not propose ``command`` now (None: it may)."""
        if self._finalized or not isinstance(command, Command):  # (not: a test's stand-in)
            return None
        current = self.cluster_version
        if current >= vs.RELEASE:
            self._finalized = True
            return None
        if current < vs.BASELINE_RELEASE:
            older = self.raft.older_than_baseline()  # type: ignore[attr-defined]
            if older:
                return vs.older_than_baseline_hint(older)
        if isinstance(command, SetClusterVersion):
            if command.version > vs.RELEASE:
                return f"release {command.version} is newer than this node's ({vs.RELEASE})"
            releases = self.member_releases()  # type: ignore[attr-defined]
            behind = {a: r for a, r in releases.items() if (r or 0) < command.version}
            if behind:
                shown = ", ".join(f"{a}: {r or 'unknown'}" for a, r in sorted(behind.items()))
                return f"not every member runs release {command.version} yet ({shown})"
            return None
        return vs.refusal(command, current)

    def too_old_for(self, command: Command) -> str | None:
        """Why this release cannot apply ``command`` (it raises the cluster version past this
        release: an upgrade finalized without this node); None when it can."""
        if isinstance(command, SetClusterVersion) and command.version > vs.RELEASE:
            return str(ReleaseTooOld(command.version, vs.RELEASE))
        return None


class Finalizer:
    """The leader loop's part: propose ``SetClusterVersion(RELEASE)`` once every member runs
    this release (or a newer one)."""

    def __init__(self, node: Any, proposer: Any) -> None:
        self._node = node
        self._proposer = proposer
        self._next_check = 0.0

    def maybe_finalize(self) -> bool:
        """True when this call committed the new cluster version."""
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + FINALIZE_CHECK_INTERVAL
        if not isinstance(self._node, ReleaseMixin) or self._node.cluster_version >= vs.RELEASE:
            return False
        releases = self._node.member_releases()
        if any((release or 0) < vs.RELEASE for release in releases.values()):
            return False
        command = self._proposer.make(SetClusterVersion, version=vs.RELEASE)
        result = self._proposer.propose(command)
        log.info(
            "cluster version %d committed: every member runs release %d or newer (%s);"
            " a node of an older release can no longer join",
            vs.RELEASE,
            vs.RELEASE,
            ", ".join(f"{a}: {r}" for a, r in sorted(releases.items())),
        )
        return bool(result.ok)


def hold_back_new_dags(
    node: Any, specs: list[DagSpec], errors: list[ImportErrorRecord]
) -> tuple[list[DagSpec], list[ImportErrorRecord]]:
    """Before finalization, a parsed DAG that uses what the cluster's release lacks is not
    proposed (it would be refused, and with it every DAG of its entry): it becomes an import
    error of its file that says so, and that file's registered DAGs stay as they were."""
    if not isinstance(node, ReleaseMixin):
        return specs, errors
    version = node.cluster_version
    if version >= vs.RELEASE:
        return specs, errors
    kept: list[DagSpec] = []
    held: dict[str, list[str]] = {}
    for spec in specs:
        why = vs.refusal(spec, version)
        if why is None:
            kept.append(spec)
        else:
            held.setdefault(spec.fileloc, []).append(f"DAG {spec.dag_id!r}: {why}")
    if not held:
        return specs, errors
    failing = {error.fileloc for error in errors}
    extra = [
        ImportErrorRecord(fileloc=fileloc, message="; ".join(reasons)[:_MAX_MESSAGE])
        for fileloc, reasons in sorted(held.items())
        if fileloc not in failing
    ]
    return kept, [*errors, *extra]


_MAX_MESSAGE = 2000  # far below the core's bound on an import error's message
