"""The cheap consistent copy of the replicated state that readers build on (read views).

Taken under the node's lock; what it copies is what apply may change later (runs and task
instances), what it shares is frozen (DAG records, import errors). Incremental: a capture
given the previous one recopies only the runs the state's change feed
(:class:`raftsched.core.changes.ChangeFeed`) names, so the lock is held O(changes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from raftsched.core.model import DagRecord, DagRun, ImportErrorRecord, TaskInstance

__all__ = ["Captured", "capture"]


@dataclass(frozen=True)
class Captured:
    """The copy :func:`capture` takes under the lock (nothing sorted, nothing indexed)."""

    index: int
    state_id: int  # id() of the state object: a snapshot restore swaps it
    dags: dict[str, DagRecord]
    runs: dict[tuple[str, str], DagRun]  # (dag_id, run_id) -> a copy
    tis: dict[tuple[str, str], tuple[TaskInstance, ...]]
    import_errors: tuple[ImportErrorRecord, ...]
    outbox_acked_seq: int
    outbox_last_seq: int
    feed_epoch: int = -1  # the state's change feed after this copy (see capture)


_RUN_FIELDS = attrgetter(*(f.name for f in fields(DagRun)))
_TI_FIELDS = attrgetter(*(f.name for f in fields(TaskInstance)))


def capture(state: Any, since: Captured | None = None) -> Captured:
    """A consistent copy of ``state`` (call it under the node's lock). DagRecord and
    ImportErrorRecord are frozen and shared; DagRun and TaskInstance are mutable and copied
    (by their constructors with every field in order: a third faster than ``replace``).

    Given the previous capture of the same state object (``since``), only the runs that the
    state's change feed names are copied again, the others' copies are shared: the lock is
    held O(changes), not O(live runs) (0.2-0.6 s at 10,000 live runs with 50,000 task
    instances stalled apply, and with it every commit). Without a feed, or when the feed
    cannot say what changed, everything is copied."""
    feed = getattr(state, "change_feed", None)
    changed = None
    if feed is not None:
        same = since is not None and since.state_id == id(state)
        changed = feed.drain(since.feed_epoch if same and since is not None else -1)
    if changed is not None and since is not None:
        runs = dict(since.runs)
        tis = dict(since.tis)
        table = state.run_table
        for key in changed:
            rec = table.get(*key)
            if rec is None:
                runs.pop(key, None)
                tis.pop(key, None)
            else:
                runs[key] = DagRun(*_RUN_FIELDS(rec.run))
                tis[key] = tuple(TaskInstance(*_TI_FIELDS(ti)) for ti in rec.tis.values())
    else:
        runs = {}
        tis = {}
        for run in state.runs():
            key = (run.dag_id, run.run_id)
            runs[key] = DagRun(*_RUN_FIELDS(run))
            tis[key] = tuple(TaskInstance(*_TI_FIELDS(ti)) for ti in state.task_instances(*key))
    return Captured(
        index=int(state.applied_index),
        state_id=id(state),
        dags=dict(state.dags),
        runs=runs,
        tis=tis,
        import_errors=tuple(state.import_errors),
        outbox_acked_seq=int(state.outbox_acked_seq),
        outbox_last_seq=int(state.outbox_last_seq),
        feed_epoch=feed.epoch if feed is not None else -1,
    )
