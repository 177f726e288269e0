"""DagService: DAGs, runs, task instances and logs; live state merged with DB history.

Reads of live state come from the node's read view (:meth:`ApiContext.view`: an immutable
copy at one applied index, indexed per query, so a page costs O(page) and holds no lock that
apply needs) and carry that view's Freshness; history (finished runs, past attempts, log
chunks) comes from the metadata DB. Writes (pause, trigger, clear, mark) go through Raft with
the request's ``request_id``; what a write answers is read from a view that holds it.

- ListDags: filter and page (token = last dag_id) over the view's sorted DAGs; each DAG gets
  its next run from its timetable and its newest runs (live + DB; DB down: live only), both
  cached (:class:`history.NextRunCache`, :class:`history.RecentRunsCache`).
- TriggerDag: the replicated state forgets finished runs after retention, the DB does not;
  so unless the live state knows the slot, the DB is asked first (ALREADY_EXISTS if taken).
  Whether the DAG exists is decided in apply, from committed state: a replica that has not
  applied the DAG's registration yet proposes anyway and never refuses it on its own.
- ListTaskInstances: every attempt of every task (DB rows, the live current attempt on top),
  sorted by task_id then try_number: the last entry of a task is its current attempt.
- BackfillDag, GetTaskLog, ExplainSlot: modules ``backfill``, ``task_logs``, ``explain``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import grpc

from raftsched import clock
from raftsched.api.gen import dag_pb2, dag_pb2_grpc
from raftsched.api.servicers import bounds, convert, dag_source, history
from raftsched.api.servicers.backfill import Backfill
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.explain import ExplainSlot
from raftsched.api.servicers.live_workers import LiveWorkers
from raftsched.api.servicers.run_params import check_trigger_params
from raftsched.api.servicers.task_logs import TaskLogs
from raftsched.api.status import invalid_argument, raise_for_result, translate_errors
from raftsched.core import commands as c
from raftsched.core import limits
from raftsched.core import results as r
from raftsched.core.model import RunType, TaskKey, TaskState
from raftsched.errors import DagNotFound, StatusError, StoreUnavailable
from raftsched.store import queries

log = logging.getLogger(__name__)

DEFAULT_PAGE, MAX_PAGE = 100, 1000
DEFAULT_RECENT, MAX_RECENT = 10, 100


def _required_id(value: str, field: str) -> str:
    if not value:
        raise invalid_argument(field, value, "must not be empty")
    return bounds.ident(field, value)  # 1..250 printable characters, valid UTF-8


def _bounded(value: int, field: str, default: int, most: int) -> int:
    if value == 0:
        return default
    if value > most:
        raise invalid_argument(field, value, f"expected 0 (default {default}) to {most}")
    return value


class DagServicer(dag_source.DagSourceMixin, ExplainSlot, dag_pb2_grpc.DagServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self._backfill = Backfill(ctx)
        self._next_runs = history.NextRunCache()
        self._recent_db = history.RecentRunsCache()
        self._logs = TaskLogs(ctx)
        self._live = LiveWorkers(ctx)  # whose queues are served: the "waiting" notes

    # -- DAGs --------------------------------------------------------------------------------

    @translate_errors
    def ListDags(self, request: Any, context: grpc.ServicerContext) -> Any:
        page_size = _bounded(request.page_size, "page_size", DEFAULT_PAGE, MAX_PAGE)
        recent = _bounded(request.recent_runs, "recent_runs", DEFAULT_RECENT, MAX_RECENT)
        bounds.text("search", request.search, bounds.MAX_SEARCH_CHARS)
        bounds.tags("tags", request.tags)
        bounds.text("page_token", request.page_token, limits.MAX_ID_CHARS)

        view = self.ctx.view()
        keep = None
        if request.search:
            needle = request.search.lower()

            def keep(rec: Any) -> bool:
                return needle in rec.spec.dag_id.lower() or needle in rec.spec.description.lower()

        found = view.dag_page(
            after=request.page_token,
            limit=page_size + 1,
            include_inactive=request.include_inactive,
            paused=request.paused if request.HasField("paused") else None,
            tags=request.tags,
            keep=keep,
        )
        more = len(found.dags) > page_size
        page = found.dags[:page_size]
        now = clock.now()
        engine = self._engine_or_none()
        dags = []
        for record in page:
            runs = self._recent(engine, view, record.dag_id, recent)
            dags.append(convert.dag(record, next_run=self._next_runs.get(record, now), recent=runs))
        return dag_pb2.ListDagsResponse(
            dags=dags,
            next_page_token=page[-1].dag_id if more and page else "",
            total_size=found.total,
            freshness=self.ctx.view_freshness(view),
        )

    @translate_errors
    def GetDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        view, record = self._dag_in_view(dag_id)
        recent = self._recent(self._engine_or_none(), view, dag_id, DEFAULT_RECENT)
        dag = convert.dag(record, next_run=self._next_runs.get(record, clock.now()), recent=recent)
        fresh = self.ctx.view_freshness(view)
        tasks = [
            convert.task_definition(t) for t in sorted(record.spec.tasks, key=lambda t: t.task_id)
        ]
        return dag_pb2.GetDagResponse(dag=dag, tasks=tasks, freshness=fresh)

    @translate_errors
    def PauseDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._set_paused(request, context, paused=True)

    @translate_errors
    def UnpauseDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._set_paused(request, context, paused=False)

    def _set_paused(self, request: Any, context: grpc.ServicerContext, *, paused: bool) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        request_id = bounds.request_id(request.request_id)
        note = bounds.text("note", request.note, limits.MAX_PAUSE_NOTE_CHARS) if paused else ""
        command = self.ctx.make(c.SetPaused, request_id, dag_id=dag_id, paused=paused, note=note)
        result = self.ctx.propose(command, context)
        raise_for_result(result, dag_id=dag_id)
        # The write is applied here (the proposer returned): answer from a view that has it.
        view, record = self._dag_in_view(dag_id, min_index=self.ctx.applied_through())
        dag = convert.dag(record, next_run=self._next_runs.get(record, clock.now()))
        return dag_pb2.PauseDagResponse(
            dag=dag,
            changed=result.ok and result.reason != r.UNCHANGED,
            freshness=self.ctx.view_freshness(view),
        )

    @translate_errors
    def TriggerDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        conf = self._conf(request.conf_json)
        logical = bounds.timestamp(request, "logical_date") or clock.now()
        run_id = bounds.ident("run_id", request.run_id, required=False)
        request_id = bounds.request_id(request.request_id)

        def known(state: Any) -> tuple[bool, bool]:
            if state.dag(dag_id) is None:  # this replica may lag: apply decides (UNKNOWN_DAG)
                return False, False
            runs = list(state.runs(dag_id))
            return (
                any(run.logical_date == logical for run in runs),
                bool(run_id) and any(run.run_id == run_id for run in runs),
            )

        check_trigger_params(self.ctx, dag_id, conf, context)
        (date_live, id_live), _ = self.ctx.read(known)
        if not date_live and not id_live:
            self._check_history(dag_id, logical, run_id)
        decision = c.RunDecision(
            dag_id, logical, logical, logical, run_type=RunType.MANUAL, conf=conf, run_id=run_id
        )
        command = self.ctx.make(c.CreateRuns, request_id, runs=(decision,))
        result = self.ctx.propose(command, context)
        item = result.value[0] if isinstance(result.value, tuple) and result.value else result
        raise_for_result(item, dag_id=dag_id, run_id=run_id or None)
        created = item.value if isinstance(item.value, str) else run_id
        run, fresh = self.ctx.read(lambda st: _copy(st.run(dag_id, created)))
        if run is None:  # evicted already (tiny retention): the DB has it
            run = queries.get_run(self.ctx.require_engine(), dag_id, created)
        if run is None:
            raise StatusError(grpc.StatusCode.INTERNAL, f"run {created!r} created but not found")
        return dag_pb2.TriggerDagResponse(run=convert.dag_run(run), freshness=fresh)

    @translate_errors
    def BackfillDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        bounds.request_id(request.request_id)
        return self._backfill(request, context, self._conf(request.conf_json), dag_id)

    def _conf(self, text: str) -> dict[str, Any]:
        """The conf as a checked dict: a JSON object within [api] max_conf_bytes and the
        limits (size, depth: refused before json.loads recurses, clean strings)."""
        limit = getattr(self.ctx.api, "max_conf_bytes", None) or limits.MAX_CONF_BYTES
        return bounds.conf(text, limit, "conf_json")

    def _check_history(self, dag_id: str, logical: datetime, run_id: str) -> None:
        engine = self.ctx.require_engine()
        newest = queries.list_runs(engine, dag_id, before=logical + history._US, limit=1)
        taken = bool(newest) and newest[0].logical_date == logical
        if not taken and run_id:
            taken = queries.get_run(engine, dag_id, run_id) is not None
        if taken:
            raise StatusError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"DAG {dag_id!r} already has a run at logical date {logical.isoformat()}"
                f"{' or with run id ' + repr(run_id) if run_id else ''} (in the run history);"
                " pick another logical date",
            )

    # -- runs --------------------------------------------------------------------------------

    @translate_errors
    def ListRuns(self, request: Any, context: grpc.ServicerContext) -> Any:
        page_size = _bounded(request.page_size, "page_size", DEFAULT_PAGE, MAX_PAGE)
        dag_id = bounds.ident("dag_id", request.dag_id, required=False) or None
        limits.check_count("states", len(request.states), bounds.MAX_FILTER_STATES)
        states = [convert.run_state(n, f"states[{i}]") for i, n in enumerate(request.states)]
        wanted = {s for s in states if s is not None}
        run_type = convert.run_type(request.run_type, "run_type")
        cursor = history.RunCursor.decode(request.page_token)

        view = self.ctx.view()
        # The first page_size + 1 live runs after the cursor that pass the filters (in list
        # order, from the view's per-DAG/per-state indexes): O(page), not O(live runs).
        matching = (
            run
            for run in view.iter_runs(
                dag_id, states=wanted, after=cursor.order if cursor is not None else None
            )
            if run_type is None or run.run_type == run_type
        )
        live = list(itertools.islice(matching, page_size + 1))
        db, more = history.db_runs_after(
            self.ctx.require_engine(),
            cursor,
            page_size + 1,
            dag_id=dag_id,
            states=sorted(wanted) or None,
            run_type=run_type,
        )
        # A DB row of a run the view holds is replaced by the live run (it is fresher).
        db = [view.run(run.dag_id, run.run_id) or run for run in db]
        runs = history.merge_runs(
            db, live, cursor=cursor, keep=lambda run: not wanted or run.state in wanted
        )
        more = more or len(runs) > page_size
        page = runs[:page_size]
        token = history.RunCursor.of(page[-1]).encode() if more and page else ""
        return dag_pb2.ListRunsResponse(
            runs=[convert.dag_run(run) for run in page],
            next_page_token=token,
            freshness=self.ctx.view_freshness(view),
        )

    @translate_errors
    def ListTaskInstances(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        run_id = _required_id(request.run_id, "run_id")

        view = self.ctx.view()
        run, live = view.run(dag_id, run_id), view.task_instances(dag_id, run_id)
        fresh = self.ctx.view_freshness(view)
        engine = self.ctx.require_engine() if run is None else self._engine_or_none()
        rows: list[Any] = []
        if engine is not None:
            try:
                rows = queries.list_task_instances(engine, dag_id, run_id)
                if run is None:
                    run = queries.get_run(engine, dag_id, run_id)
            except StoreUnavailable:
                if run is None:
                    raise
                log.info("metadata DB unavailable: listing live task instances only")
        if run is None:
            raise StatusError(
                grpc.StatusCode.NOT_FOUND,
                f"run {run_id!r} of DAG {dag_id!r} not found; `raftsched runs list {dag_id}`"
                " shows its runs",
            )
        max_tries = {ti.key.task_id: ti.max_tries for ti in live}
        out = []
        for task_id, _, value in history.merge_attempts(rows, live):
            if hasattr(value, "key"):
                out.append(convert.task_instance(value))
            else:
                out.append(convert.attempt(value, max_tries.get(task_id, 0)))
        self._live.annotate(view.dag(dag_id), out)
        return dag_pb2.ListTaskInstancesResponse(
            run=convert.dag_run(run), task_instances=out, freshness=fresh
        )

    @translate_errors
    def ClearTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        run_id = _required_id(request.run_id, "run_id")
        command = self.ctx.make(
            c.ClearTasks,
            bounds.request_id(request.request_id),
            dag_id=dag_id,
            run_id=run_id,
            task_ids=bounds.ids("task_ids", request.task_ids, limits.MAX_ITEMS_PER_COMMAND),
            include_downstream=request.include_downstream,
        )
        result = self.ctx.propose(command, context)
        _raise_for_run(result, dag_id, run_id)
        return dag_pb2.ClearTasksResponse(
            cleared_task_ids=sorted(result.value or ()), freshness=self.ctx.freshness()
        )

    @translate_errors
    def MarkTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = _required_id(request.dag_id, "dag_id")
        run_id = _required_id(request.run_id, "run_id")
        if not request.task_ids:
            raise invalid_argument("task_ids", [], "name at least one task")
        state = convert.task_state(request.state, "state")
        if state not in (TaskState.SUCCESS, TaskState.FAILED):
            raise invalid_argument(
                "state", request.state, "expected TASK_STATE_SUCCESS or TASK_STATE_FAILED"
            )
        command = self.ctx.make(
            c.MarkTasks,
            bounds.request_id(request.request_id),
            dag_id=dag_id,
            run_id=run_id,
            task_ids=bounds.ids("task_ids", request.task_ids, limits.MAX_ITEMS_PER_COMMAND),
            state=state,
        )
        result = self.ctx.propose(command, context)
        _raise_for_run(result, dag_id, run_id)
        return dag_pb2.MarkTasksResponse(
            marked_task_ids=sorted(result.value or ()), freshness=self.ctx.freshness()
        )

    # -- logs and errors ---------------------------------------------------------------------

    @translate_errors
    def GetTaskLog(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        key = TaskKey(
            _required_id(request.dag_id, "dag_id"),
            _required_id(request.run_id, "run_id"),
            _required_id(request.task_id, "task_id"),
        )
        yield from self._logs.stream(key, request, context)

    @translate_errors
    def ListImportErrors(self, request: Any, context: grpc.ServicerContext) -> Any:
        view = self.ctx.view()
        errors, fresh = view.import_errors, self.ctx.view_freshness(view)
        return dag_pb2.ListImportErrorsResponse(
            import_errors=[
                dag_pb2.DagImportError(fileloc=e.fileloc, message=e.message, traceback=e.traceback)
                for e in sorted(errors, key=lambda e: e.fileloc)
            ],
            freshness=fresh,
        )

    # -- helpers -----------------------------------------------------------------------------

    def _dag_in_view(self, dag_id: str, min_index: int = 0) -> tuple[Any, Any]:
        view = self.ctx.view(min_index)
        record = view.dag(dag_id)
        if record is None:
            raise DagNotFound(dag_id)
        return view, record

    def _engine_or_none(self) -> Any:
        return self.ctx.engine

    def _recent(self, engine: Any, view: Any, dag_id: str, count: int) -> list[Any]:
        """The DAG's ``count`` newest runs: the view's live ones over the DB's (cached while
        nothing new was materialized); the DB down: live only."""
        db: list[Any] = []
        if engine is not None and count > 0:
            try:
                db = self._recent_db.get(engine, dag_id, count, view.outbox_acked_seq)
            except StoreUnavailable:
                db = []
        return history.newest_merged(db, view.runs_of(dag_id), view.run, count)


def _copy(run: Any) -> Any:
    return None if run is None else replace(run)


def _raise_for_run(result: r.Result, dag_id: str, run_id: str) -> None:
    task_ids = result.value if isinstance(result.value, tuple) else ()
    task = ", ".join(map(str, task_ids)) if task_ids else None
    if result.reason == r.UNKNOWN_TASK:
        raise_for_result(
            r.Result(False, r.UNKNOWN_TASK), dag_id=dag_id, run_id=run_id, task_id=task
        )
    raise_for_result(result, dag_id=dag_id, run_id=run_id)
