"""Replay a node's data dir offline: its snapshot, then every journal entry, in the pure core.

No network, no DB: the same ``SchedulerState.apply`` the node ran, on the same entries, gives
the same decisions and the same digest. That is what makes a shipped data dir a bug report
that replays bit for bit (``raftsched debug replay``).

Only committed entries are applied: up to the later of the commit index the node saved (at
most a second old) and the index of its digest stamp (applied, so committed). A tail past
both may never have been committed; it is counted, not applied. With neither on disk, the
whole journal is applied. The digest is checked where the node recorded one
(:mod:`raftsched.raft.offline`, ``raft.digest``); the filters only choose what is printed,
the whole log is always applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from raftsched.core import versions as vs
from raftsched.core.commands import Batch, CompleteAttempt, CreateRuns, SetClusterVersion
from raftsched.core.model import Lease, TaskKey
from raftsched.core.results import Item, Result
from raftsched.core.state import SchedulerState
from raftsched.errors import NotANodeDir, ReleaseTooOld, ReplayRefused
from raftsched.raft import offline


@dataclass(frozen=True, slots=True)
class Decision:
    index: int
    term: int
    command: str  # the command's class name, or what Raft's own entry is
    dag_ids: tuple[str, ...]
    run_id: str
    task_id: str
    ok: bool
    reason: str
    changes: tuple[str, ...]
    at: str  # the command's ``now`` (the leader's clock when it proposed), ISO 8601


@dataclass(slots=True)
class DigestCheck:
    index: int  # where the node recorded its digest
    recorded: str
    replayed: str | None = None  # None: the replay never reached that index

    @property
    def matches(self) -> bool | None:
        return None if self.replayed is None else self.replayed == self.recorded


@dataclass(slots=True)
class Replay:
    node_dir: Path
    snapshot_index: int = 0
    applied_to: int = 0
    not_applied: int = 0  # entries past the commit index: maybe never committed
    digest: str = ""
    check: DigestCheck | None = None
    runs: dict[tuple[str, str], str] = field(default_factory=dict)  # (dag, run) -> state


def replay(path: str | Path, on_decision: Callable[[Decision], None]) -> Replay:
    try:
        node_dir = offline.find_node_dir(path)
        snapshot = offline.read_snapshot(node_dir)
    except ValueError as err:  # NotANodeDir, or a snapshot file of another format
        raise ReplayRefused(f"cannot replay {path}: {err}") from err
    state = SchedulerState.restore(snapshot.state) if snapshot else SchedulerState()
    report = Replay(node_dir=node_dir, snapshot_index=snapshot.index if snapshot else 0)
    for run in state.runs():
        report.runs[(run.dag_id, run.run_id)] = str(run.state.value)
    stamp = offline.read_digest_stamp(node_dir)
    if stamp is not None:
        report.check = DigestCheck(index=stamp[0], recorded=stamp[1])
    limits = [i for i in (offline.commit_index(node_dir), stamp and stamp[0]) if i]
    last = max(limits) if limits else None
    _check(report, state, state.applied_index)
    for entry in _entries(node_dir, path):
        if entry.index <= state.applied_index:
            continue  # before the snapshot (the journal keeps two entries it covers)
        if last is not None and entry.index > last:
            report.not_applied += 1
            continue
        if entry.command is None:  # Raft's own: the node's state machine never sees it
            on_decision(Decision(entry.index, entry.term, entry.kind, (), "", "", True, "", (), ""))
            continue
        _refuse_newer(entry.command)
        result = state.apply(entry.command, log_index=entry.index)
        for decision in _decisions(entry.index, entry.term, entry.command, result):
            for change in decision.changes:
                if change.startswith("run created "):
                    dag_id, _, run_id = change.removeprefix("run created ").partition("/")
                    report.runs.setdefault((dag_id, run_id), "")
            on_decision(decision)
        _check(report, state, entry.index)
    for run in state.runs():
        report.runs[(run.dag_id, run.run_id)] = str(run.state.value)
    report.applied_to = int(state.applied_index)
    report.digest = state.digest()
    return report


def _entries(node_dir: Path, path: str | Path) -> Iterator[offline.Entry]:
    try:
        yield from offline.read_entries(node_dir)
    except NotANodeDir as err:
        raise ReplayRefused(f"cannot replay {path}: {err}") from err


def _refuse_newer(command: Any) -> None:
    # A log of a newer release: this release cannot apply what follows alike; say so rather
    # than print decisions that differ from the ones the cluster took.
    if isinstance(command, SetClusterVersion) and command.version > vs.RELEASE:
        raise ReleaseTooOld(command.version, vs.RELEASE)
    for sub in getattr(command, "commands", ()) if isinstance(command, Batch) else ():
        _refuse_newer(sub)


def _decisions(index: int, term: int, command: Any, result: Result) -> Iterator[Decision]:
    """One decision per command; a Batch (a leader tick's commands in one entry) gives one per
    command in it, all at the entry's index."""
    subs = result.value
    if (
        isinstance(command, Batch)
        and isinstance(subs, tuple)
        and len(subs) == len(command.commands)
    ):
        for sub, sub_result in zip(command.commands, subs, strict=True):
            yield from _decisions(index, term, sub, sub_result)
        return
    yield _describe(index, term, command, result)


def _check(report: Replay, state: SchedulerState, index: int) -> None:
    if report.check is not None and report.check.index == index:
        report.check.replayed = state.digest()


def _describe(index: int, term: int, command: Any, result: Result) -> Decision:
    dag_ids, run_id, task_id = _subject(command)
    changes: list[str] = []
    items = result.value if isinstance(result.value, list | tuple) else [result.value]
    for pos, item in enumerate(items):
        value = item
        if isinstance(item, Item):
            if not item.ok:
                continue
            value = item.value
        value = getattr(value, "lease", value)  # LeaseTasks answers grants that hold one
        if isinstance(command, CreateRuns) and isinstance(value, str) and pos < len(command.runs):
            decision = command.runs[pos]
            if getattr(decision, "skip_reason", ""):  # a range of slots, no run (slot_policy)
                first, last = decision.data_interval_start, decision.logical_date
                span = f"{first.isoformat()} to {last.isoformat()}"
                changes.append(f"slots skipped {decision.dag_id} {span} ({value})")
            else:
                changes.append(f"run created {decision.dag_id}/{value}")
        elif isinstance(value, Lease):
            key = value.key
            changes.append(
                f"lease {key.dag_id}/{key.run_id}/{key.task_id} try {value.try_number}"
                f" to {value.worker_id} token {value.token}"
            )
    if isinstance(command, CompleteAttempt) and result.ok:
        outcome = "skipped" if command.skipped else "success" if command.success else "failed"
        changes.append(f"outcome {outcome} (token {command.token})")
    at = command.now.isoformat() if isinstance(getattr(command, "now", None), datetime) else ""
    return Decision(
        index=index,
        term=term,
        command=type(command).__name__,
        dag_ids=dag_ids,
        run_id=run_id,
        task_id=task_id,
        ok=result.ok,
        reason=result.reason + (" (duplicate request)" if result.duplicate else ""),
        changes=tuple(changes),
        at=at,
    )


def _subject(command: Any) -> tuple[tuple[str, ...], str, str]:
    """(the DAGs a command touches, its run and task when it names exactly one)."""
    keys: list[TaskKey] = []
    dags: list[str] = []
    if isinstance(getattr(command, "dag_id", None), str):
        dags.append(command.dag_id)
    dags.extend(getattr(command, "dag_ids", ()) or ())
    for many in ("specs", "runs"):
        dags.extend(str(getattr(x, "dag_id", "")) for x in getattr(command, many, ()) or ())
    if isinstance(getattr(command, "key", None), TaskKey):
        keys.append(command.key)
    for many in ("items", "leases"):
        for x in getattr(command, many, ()) or ():
            key = getattr(x, "key", None)
            if isinstance(key, TaskKey):
                keys.append(key)
    dags.extend(k.dag_id for k in keys)
    unique = tuple(dict.fromkeys(d for d in dags if d))
    run_id = keys[0].run_id if len({(k.dag_id, k.run_id) for k in keys}) == 1 else ""
    task_id = keys[0].task_id if len(keys) == 1 else ""
    return unique, run_id, task_id
