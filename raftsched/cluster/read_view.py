"""Read views: an immutable copy of the replicated state at one applied index, for readers.

Why: the API used to answer every list query inside ``SchedulerNode.read`` (the lock that
apply holds), sorting every DAG and copying every live run per request, so each page view
also slowed the state machine. Now a reader takes a :class:`ReadView` from :class:`ReadViews`
and builds its page from it without any lock.

:func:`~raftsched.cluster.state_copy.capture` is the cheap consistent copy of the state at
an applied index (under the node's lock: frozen records shared, runs and task instances
copied, only those that changed since the last capture, nothing sorted there);
:meth:`ReadView.build` indexes it outside the lock. (Snapshots are the other consistent
copy: a forked child's pages, :mod:`raftsched.raft.snapshots`.)

Contract:

- A view holds one applied index (:attr:`ReadView.index`); everything in it is the state
  after applying exactly that index. An answer built from a view reports ``view.index`` as
  its freshness: clients use it for read-your-writes (:mod:`raftsched.api.consistency`).
- :meth:`ReadViews.get` (``min_index``) returns a view at ``>= min_index`` whenever the node
  has applied ``min_index``. Otherwise the published view is reused while it is younger
  than the reuse interval, and rebuilt on the first read after that once the applied index
  moved (the node's apply listener counts applies; a state swapped in by a snapshot is
  noticed within :data:`RECHECK` s). The reuse interval is :data:`LOCK_SHARE` times what
  the last copy held the lock, capped at ``max_age`` (default :data:`MAX_AGE`): a small
  state (a copy of well under a millisecond) is copied on nearly every read after a change,
  so reads are as fresh as before; a big one (tens of milliseconds for thousands of live
  runs) at most every LOCK_SHARE copy times, so copies hold the lock at most ~1/LOCK_SHARE
  of the time. A read that needs a newer index than the view's waits for the next allowed
  copy (at most the reuse interval), so read-your-writes demands cannot starve apply
  either. Without such a demand a view lags by at most ``max_age`` plus one build.
- Readers never wait for apply: the lock is taken only by :func:`capture` (one thread at a
  time: single flight; a reader whose ``min_index`` the current view satisfies does not wait
  for a build in progress, it takes the current view).
- Views are immutable (tuples and dicts nobody writes after :meth:`ReadView.build`); the
  records in them are copies or frozen dataclasses: never modify what a view returns.
- Per-query indexes, so that a page costs O(page): DAGs sorted by id per (include inactive,
  paused) filter and per tag; runs in list order (newest logical date first) per DAG and for
  all DAGs, and per (DAG or all, state); task instances by run.

Cost: the first capture is one copy per live run and task instance under the lock (40-100 ms
for 5,000 runs with 15,000 task instances on 2 busy cores; 0.2-0.6 s at 10,000 runs with
50,000, which stalled apply and every commit); later ones copy the runs that commands
touched since (the change feed: the footprint the digest follows) and share the rest. The
build (sorting, grouping) is O(live state) outside the lock, on the reader's thread: the
freshness stamp of every answer (:meth:`ReadViews.applied_index`) never builds one.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from raftsched.cluster.state_copy import Captured, capture
from raftsched.core.model import DagRecord, DagRun, ImportErrorRecord, TaskInstance

log = logging.getLogger(__name__)

MAX_AGE = 1.0  # seconds a view may lag the state at most (when nobody needs newer)
LOCK_SHARE = 10  # a view is reused for this many times what copying it held the lock
RECHECK = 1.0  # seconds after which a view is checked against the state even with no apply
RunKey = tuple[float, str, str]  # (-logical_date timestamp, dag_id, run_id): the list order


def run_order(run: DagRun) -> RunKey:
    return (-run.logical_date.timestamp(), run.dag_id, run.run_id)


@dataclass(frozen=True)
class DagPage:
    total: int  # DAGs that pass the filter, on every page
    dags: list[DagRecord]  # up to ``limit`` (one more than asked: the caller's "more?")


@dataclass(frozen=True)
class ReadView:
    index: int
    state_id: int
    built_at: float  # time.monotonic()
    dags: Mapping[str, DagRecord]
    import_errors: tuple[ImportErrorRecord, ...]
    outbox_acked_seq: int
    outbox_last_seq: int
    _dag_lists: Mapping[tuple[bool, bool | None], tuple[DagRecord, ...]]
    _dag_keys: Mapping[tuple[bool, bool | None], tuple[str, ...]]
    _by_tag: Mapping[str, tuple[DagRecord, ...]]
    _runs: Mapping[tuple[str, str], DagRun]
    _run_lists: Mapping[tuple[str | None, str | None], tuple[DagRun, ...]]
    _run_keys: Mapping[tuple[str | None, str | None], tuple[RunKey, ...]]
    _tis: Mapping[tuple[str, str], tuple[TaskInstance, ...]] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> ReadView:
        return cls.build(Captured(0, 0, {}, {}, {}, (), 0, 0))

    @classmethod
    def build(cls, cap: Captured, built_at: float | None = None) -> ReadView:
        """Index a capture (outside any lock)."""
        records = sorted(cap.dags.values(), key=lambda rec: rec.dag_id)
        lists: dict[tuple[bool, bool | None], tuple[DagRecord, ...]] = {}
        for inactive in (False, True):
            for paused in (None, False, True):
                lists[(inactive, paused)] = tuple(
                    rec
                    for rec in records
                    if (inactive or rec.active) and (paused is None or rec.paused == paused)
                )
        by_tag: dict[str, list[DagRecord]] = {}
        for rec in records:
            for tag in set(rec.spec.tags):
                by_tag.setdefault(tag, []).append(rec)
        ordered = sorted(cap.runs.values(), key=run_order)
        run_lists: dict[tuple[str | None, str | None], list[DagRun]] = {(None, None): ordered}
        for run in ordered:  # stays in list order within every group
            state = str(run.state)
            run_lists.setdefault((run.dag_id, None), []).append(run)
            run_lists.setdefault((run.dag_id, state), []).append(run)
            run_lists.setdefault((None, state), []).append(run)
        frozen_runs = {key: tuple(group) for key, group in run_lists.items()}
        return cls(
            index=cap.index,
            state_id=cap.state_id,
            built_at=time.monotonic() if built_at is None else built_at,
            dags=cap.dags,
            import_errors=cap.import_errors,
            outbox_acked_seq=cap.outbox_acked_seq,
            outbox_last_seq=cap.outbox_last_seq,
            _dag_lists=lists,
            _dag_keys={key: tuple(r.dag_id for r in group) for key, group in lists.items()},
            _by_tag={tag: tuple(group) for tag, group in by_tag.items()},
            _runs={(run.dag_id, run.run_id): run for run in ordered},
            _run_lists=frozen_runs,
            _run_keys={key: tuple(map(run_order, group)) for key, group in frozen_runs.items()},
            _tis=cap.tis,
        )

    # -- DAGs --------------------------------------------------------------------------------

    def dag(self, dag_id: str) -> DagRecord | None:
        return self.dags.get(dag_id)

    def dag_page(
        self,
        *,
        after: str = "",
        limit: int,
        include_inactive: bool = False,
        paused: bool | None = None,
        tags: Iterable[str] = (),
        keep: Callable[[DagRecord], bool] | None = None,
    ) -> DagPage:
        """DAGs by id after ``after``: up to ``limit`` that pass the filters. O(limit) with no
        tags and no ``keep``; with them, the smallest candidate list is scanned (and counted
        for ``total``)."""
        key = (include_inactive, paused)
        wanted = set(tags)
        if not wanted and keep is None:
            group, keys = self._dag_lists[key], self._dag_keys[key]
            start = bisect.bisect_right(keys, after) if after else 0
            return DagPage(len(group), list(group[start : start + limit]))

        def passes(rec: DagRecord) -> bool:
            if not include_inactive and not rec.active:
                return False
            if paused is not None and rec.paused != paused:
                return False
            if wanted and not wanted <= set(rec.spec.tags):
                return False
            return keep is None or keep(rec)

        candidates: tuple[DagRecord, ...] = self._dag_lists[key]
        for tag in wanted:
            tagged = self._by_tag.get(tag, ())
            if len(tagged) < len(candidates):
                candidates = tagged
        chosen = [rec for rec in candidates if passes(rec)]
        start = bisect.bisect_right([rec.dag_id for rec in chosen], after) if after else 0
        return DagPage(len(chosen), chosen[start : start + limit])

    # -- runs --------------------------------------------------------------------------------

    def run(self, dag_id: str, run_id: str) -> DagRun | None:
        return self._runs.get((dag_id, run_id))

    def runs_of(self, dag_id: str | None = None) -> tuple[DagRun, ...]:
        """Every live run (of one DAG, or all), newest logical date first."""
        return self._run_lists.get((dag_id, None), ())

    def iter_runs(
        self,
        dag_id: str | None = None,
        *,
        states: Iterable[str] = (),
        after: RunKey | None = None,
    ) -> Iterator[DagRun]:
        """Live runs in list order strictly after ``after``, of one DAG or all, in one of
        ``states`` (all states when empty): each index is entered by bisection, so taking
        the first n costs O(n) (a merge of the per-state lists when several are asked)."""
        wanted = sorted({str(s) for s in states})
        groups = [(dag_id, s) for s in wanted] if wanted else [(dag_id, None)]
        iterators = []
        for group in groups:
            runs, keys = self._run_lists.get(group, ()), self._run_keys.get(group, ())
            start = bisect.bisect_right(keys, after) if after is not None else 0
            iterators.append(_from(runs, start))
        if len(iterators) == 1:
            yield from iterators[0]
        else:
            yield from heapq.merge(*iterators, key=run_order)

    def task_instances(self, dag_id: str, run_id: str) -> tuple[TaskInstance, ...]:
        return self._tis.get((dag_id, run_id), ())


def _from(items: tuple[DagRun, ...], start: int) -> Iterator[DagRun]:
    """``items[start:]`` without copying the tail (a slice would cost O(len))."""
    for i in range(start, len(items)):
        yield items[i]


class ReadViews:
    """The published :class:`ReadView` of one node, rebuilt as the module docstring says.

    ``node`` needs ``read(fn)`` (runs ``fn(state)`` under the apply lock); when it also has
    ``add_apply_listener`` (a real ``SchedulerNode``), applies are counted without any lock;
    otherwise (test doubles) every ``get`` looks at the state's index under ``read``."""

    def __init__(self, node: Any, *, max_age: float = MAX_AGE, recheck: float = RECHECK) -> None:
        self._node = node
        self.max_age = max_age
        self.recheck = recheck
        self._view: ReadView | None = None
        self._build_lock = threading.Lock()
        self._applies = 0  # bumped by the apply listener (tick thread)
        self._latest = 0  # the newest log index applied, per the listener
        self._seen_applies = -1  # _applies when the published view was captured
        self._copy_seconds = 0.0  # what the last capture held the node's lock
        self._copied_at = float("-inf")  # time.monotonic() of the last capture
        self._captured: Captured | None = None  # the last capture: the next one copies less
        self.builds = 0  # views built so far (tests, metrics)
        self._listening = hasattr(node, "add_apply_listener")
        if self._listening:
            node.add_apply_listener(self._on_apply)

    def _on_apply(self, log_index: int, command: Any, result: Any) -> None:
        # On the tick thread, under the node's lock: count only (listeners must be quick).
        self._applies += 1
        if log_index > self._latest:
            self._latest = log_index

    def close(self) -> None:
        if self._listening:
            remove = getattr(self._node, "remove_apply_listener", None)
            if remove is not None:
                remove(self._on_apply)

    def applied_index(self) -> int:
        """The newest index this node applied, taken without the apply lock: from the node
        when it tells (never a view build: that is O(live state), and this stamps every API
        answer, a worker's included), else from the applies it reports (a state swapped in by
        a snapshot shows once a view is rebuilt)."""
        told = getattr(self._node, "applied_index", None)
        if isinstance(told, int):
            return max(self._latest, told)
        if not self._listening:
            return int(self._node.read(lambda st: st.applied_index))
        view = self._view
        if view is None or time.monotonic() - view.built_at >= self.recheck:
            view = self.get()  # also picks up a state a snapshot swapped in
        return max(self._latest, view.index)

    def current(self) -> ReadView | None:
        """The published view as it is (may be None before the first :meth:`get`)."""
        return self._view

    def get(self, min_index: int = 0) -> ReadView:
        """A view at ``>= min_index`` when the node has applied it (else the newest there
        is), no older than ``max_age`` once the state has moved on."""
        view = self._view
        if view is not None and self._fresh(view, min_index):
            return view
        if not self._build_lock.acquire(blocking=False):
            # Someone is building: a view that satisfies min_index serves at once.
            if view is not None and view.index >= min_index:
                return view
            self._build_lock.acquire()
        try:
            view = self._view
            if view is not None and self._fresh(view, min_index):
                return view
            if self._listening:  # too soon after the last copy: wait for the next one
                wait = self._copied_at + self._reuse() - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            return self._rebuild(view)
        finally:
            self._build_lock.release()

    def _fresh(self, view: ReadView, min_index: int) -> bool:
        if view.index < min_index:
            return False
        age = time.monotonic() - view.built_at
        if self._listening:
            moved = self._applies != self._seen_applies
            return (not moved or age < self._reuse()) and age < self.recheck
        return False  # no listener: look at the state (cheap when it has not moved)

    def _reuse(self) -> float:
        """Seconds a view is reused after the state moved on (see the module docstring)."""
        return min(self.max_age, LOCK_SHARE * self._copy_seconds)

    def _rebuild(self, old: ReadView | None) -> ReadView:
        applies = self._applies  # read before the capture: an apply after it rebuilds again
        same = (old.index, old.state_id) if old is not None else None

        held = [0.0]

        def take(state: Any) -> Captured | None:
            if same == (int(state.applied_index), id(state)):
                return None  # nothing moved: keep the view, skip the copy
            started = time.perf_counter()
            try:
                return capture(state, self._captured)
            finally:
                held[0] = time.perf_counter() - started

        captured = self._node.read(take)
        if captured is None and old is not None:
            view = replace(old, built_at=time.monotonic())
        else:
            assert captured is not None
            self._captured = captured
            view = ReadView.build(captured)
            self.builds += 1
            self._copy_seconds = held[0]
            self._copied_at = time.monotonic()
        self._seen_applies = applies
        if view.index > self._latest:
            self._latest = view.index
        self._view = view
        return view
