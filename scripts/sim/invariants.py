"""The partition checker's invariants (docs/architecture.md §4), on the simulation's history.

Checked while it runs (:meth:`Checker.watch_apply` on every apply of every node, and
:meth:`Checker.during` each virtual second) and at the end (:meth:`Checker.final`, after the
heal). Each failure is one line naming the invariant.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from raftsched.core import commands as c
from scripts.sim.cluster import SimCluster
from scripts.sim.workload import Workload


class Checker:
    def __init__(self, cluster: SimCluster, workload: Workload) -> None:
        self.cluster = cluster
        self.workload = workload
        self.violations: list[str] = []
        # per node incarnation: task key -> current lease token, as that node applied it
        self._tokens: dict[str, dict[Any, int]] = defaultdict(dict)
        cluster.on_apply.append(self.watch_apply)

    def fail(self, invariant: str, detail: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(f"{invariant}: {detail}")

    def restarted(self, address: str) -> None:
        self._tokens.pop(address, None)

    def watch_apply(self, address: str, index: int, command: Any, result: Any) -> None:
        """One holder per attempt, as apply decides it: an accepted outcome carries the
        current lease token of its task, and tokens only grow."""
        if getattr(result, "duplicate", False):
            return  # a request applied again (a forwarded proposal duplicated): its old answer
        tokens = self._tokens[address]
        if isinstance(command, c.LeaseTasks) and result.ok:
            for grant in result.value or ():
                key, token = grant.lease.key, grant.lease.token
                if token != index or token <= tokens.get(key, 0):
                    self.fail(
                        "one holder per attempt",
                        f"{address} leased {key} at {index} "
                        f"with token {token} after {tokens.get(key)}",
                    )
                tokens[key] = token
        accepted = isinstance(command, c.CompleteAttempt) and result.ok
        if accepted and tokens.get(command.key) != command.token:
            self.fail(
                "one holder per attempt",
                f"{address} accepted an outcome of "
                f"{command.key} with token {command.token}, current {tokens.get(command.key)}",
            )

    def during(self) -> None:
        """Replicas agree: the same entry at every index two nodes applied, and the same
        digest at the same applied index."""
        live = self.cluster.live()
        ordered = sorted(live)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1 :]:
                left, right = self.cluster.applied[a], self.cluster.applied[b]
                small, large = (left, right) if len(left) <= len(right) else (right, left)
                for index, rid in small.items():
                    if large.get(index, rid) != rid:
                        self.fail(
                            "replicas agree",
                            f"index {index}: {a} applied {left[index]}, {b} applied {right[index]}",
                        )
                        return
        digests: dict[int, set[str]] = defaultdict(set)
        for node in live.values():
            index, digest = node.digest()
            digests[index].add(digest)
        for index, seen in digests.items():
            if len(seen) > 1:
                self.fail("replicas agree", f"{len(seen)} digests at applied index {index}")
        for address, node in live.items():
            self._one_run_per_slot(address, node)

    def _one_run_per_slot(self, address: str, node: Any) -> None:
        dates = node.read(lambda s: [r.run.logical_date for r in s.run_table.records()])
        if len(dates) != len(set(dates)):
            self.fail(
                "one run per slot",
                f"{address} holds {len(dates) - len(set(dates))} extra runs for a slot",
            )

    def final(self) -> None:
        """After the heal, every node up: nothing committed is lost, dispatch only after
        commit, hostile outcomes refused."""
        self.during()
        where: dict[str, int] = {}
        for address in self.cluster.addresses:
            have = set(self.cluster.applied[address].values())
            lost = [rid for rid in self.workload.acked if rid not in have]
            if lost:
                self.fail(
                    "nothing committed lost",
                    f"{address} lacks {len(lost)} acknowledged "
                    f"commands, first {lost[0]} ({self.workload.acked[lost[0]]})",
                )
            for index, rid in self.cluster.applied[address].items():
                where.setdefault(rid, index)
        for d in self.workload.dispatched:
            applied = [self.cluster.applied[a].get(d.token) for a in self.cluster.addresses]
            if any(x is None or x != applied[0] for x in applied):
                self.fail(
                    "dispatch only after commit",
                    f"grant of {d.key} at token {d.token} "
                    f"is not the same committed entry on every node: {applied}",
                )
                break
        holders: dict[tuple[Any, int], set[tuple[int, str]]] = defaultdict(set)
        for d in self.workload.dispatched:
            holders[(d.key, d.try_number)].add((d.token, d.worker))
        for (key, attempt), seen in holders.items():
            if len(seen) > 1:
                self.fail(
                    "one holder per attempt", f"{key} try {attempt} dispatched {sorted(seen)}"
                )
        for command in self.workload.hostile_accepted:
            self.fail("one holder per attempt", f"a hostile outcome was accepted: {command!r:.200}")
