"""BackfillDag: a run for every slot of a DAG's schedule in a range that has none yet.

Like ``airflow dags backfill -s START -e END``: the slots are the DAG's own (its cron or
interval in its time zone, bounded by its start_date and end_date), both ends included, at
most :data:`MAX_BACKFILL_RUNS` per request. A slot that already has a run — in the replicated
state or in the DB's history — is skipped, never replaced, so a backfill can be repeated
safely. Only slots up to now: later ones are the scheduler's.

The runs are manual runs (``run_id = "backfill__<logical date>"``): accepted while the DAG is
paused or at max_active_runs, their tasks leased as the DAG's max_active_tasks allows (and, if
paused, once it is unpaused). They go through Raft in commands of :data:`RUNS_PER_COMMAND`
runs, each with a request id derived from the request's and its runs, so a retried request
creates nothing twice; a slot taken meanwhile (by the scheduler, or by the request's own
first try) is reported as skipped. The state keeps
a backfilled run on a slot the scheduler has yet to reach until it does (see
``handlers_runs``), so the two never both create one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc

from raftsched import clock
from raftsched.api.gen import dag_pb2
from raftsched.api.servicers import bounds, convert
from raftsched.api.status import invalid_argument, raise_for_result
from raftsched.cluster.proposer import new_request_id
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import DagRun, DagSpec, RunType, ScheduleKind, utc_iso
from raftsched.core.timetable import Slot, timetable_for
from raftsched.dags import params as dag_params
from raftsched.errors import DagNotFound, StatusError
from raftsched.store import queries

if TYPE_CHECKING:
    from raftsched.api.servicers.context import ApiContext

MAX_BACKFILL_RUNS = 1000  # slots per request
RUNS_PER_COMMAND = 50  # runs per Raft command (the leader loop batches the same way)
_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class Plan:
    create: list[Slot]  # slots without a run, oldest first
    skipped: list[datetime]  # slots that have one


def backfill_run_id(logical_date: datetime) -> str:
    return f"backfill__{utc_iso(logical_date)}"


def plan(
    spec: DagSpec,
    start: datetime,
    end: datetime,
    taken: set[datetime],
    *,
    limit: int = MAX_BACKFILL_RUNS,
) -> Plan:
    """Which slots of ``spec`` in [start, end] to fill; raises StatusError when it cannot."""
    if spec.schedule.kind is ScheduleKind.NONE:
        raise StatusError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"DAG {spec.dag_id!r} has no schedule, so it has no slots to backfill;"
            " create runs with `raftsched dags trigger` instead",
        )
    slots = timetable_for(spec).slots_between(start - _US, end, limit + 1)
    if len(slots) > limit:
        raise invalid_argument(
            "end_date",
            utc_iso(end),
            f"the range holds more than {limit} slots of {spec.schedule.display or 'its'}"
            f" schedule from {utc_iso(start)}: backfill it in parts",
        )
    return Plan(
        create=[s for s in slots if s.logical_date not in taken],
        skipped=[s.logical_date for s in slots if s.logical_date in taken],
    )


class Backfill:
    """Serves one BackfillDag request (the DagService delegates to it)."""

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def __call__(
        self, request: Any, context: grpc.ServicerContext, conf: dict[str, Any], dag_id: str
    ) -> dag_pb2.BackfillDagResponse:
        start = _required_date(request, "start_date")
        end = _required_date(request, "end_date")
        if end < start:
            raise invalid_argument("end_date", utc_iso(end), "expected at or after start_date")
        now = clock.now()
        if end > now:
            raise invalid_argument(
                "end_date",
                utc_iso(end),
                f"in the future (now is {utc_iso(now)}): the scheduler creates those runs",
            )

        def read(state: Any) -> tuple[DagSpec, set[datetime]]:
            record = state.dag(dag_id)
            if record is None:
                raise DagNotFound(dag_id)
            live = {run.logical_date for run in state.runs(dag_id)}
            return record.spec, live

        if not self.ctx.read(lambda state: state.dag(dag_id) is not None)[0]:
            self.ctx.read_index(context)  # this replica may lag: decide from committed state
        (spec, live), fresh = self.ctx.read(read)
        dag_params.check_conf(spec.params_json, conf)  # before anything is proposed
        engine = self.ctx.require_engine()
        taken = live | queries.run_dates_between(engine, dag_id, start, end)
        todo = plan(spec, start, end, taken)
        skipped = list(todo.skipped)
        if request.dry_run:
            response = _response([_would_be(dag_id, s, conf) for s in todo.create], skipped, fresh)
            for run in response.runs:
                run.ClearField("state")  # not created: no state yet
            return response

        created: list[str] = []
        base = request.request_id or new_request_id()
        for first in range(0, len(todo.create), RUNS_PER_COMMAND):
            slots = todo.create[first : first + RUNS_PER_COMMAND]
            decisions = tuple(
                c.RunDecision(
                    dag_id,
                    slot.logical_date,
                    slot.data_interval_start,
                    slot.data_interval_end,
                    run_type=RunType.MANUAL,
                    conf=conf,
                    run_id=backfill_run_id(slot.logical_date),
                )
                for slot in slots
            )
            command = self.ctx.make(c.CreateRuns, _part_request_id(base, slots), runs=decisions)
            result = self.ctx.propose(command, context)
            raise_for_result(result, dag_id=dag_id)
            items = result.value if isinstance(result.value, tuple) else ()
            for slot, item in zip(slots, items, strict=True):
                if item.ok:
                    created.append(str(item.value))
                elif item.reason == r.RUN_EXISTS:  # the scheduler took it meanwhile
                    skipped.append(slot.logical_date)
                else:
                    raise_for_result(item, dag_id=dag_id)

        runs, fresh = self.ctx.read(
            lambda state: [_copy(state.run(dag_id, run_id)) for run_id in created]
        )
        for i, run in enumerate(runs):
            if run is None:  # already finished and evicted (tiny retention): the DB has it
                runs[i] = queries.get_run(engine, dag_id, created[i])
        return _response([run for run in runs if run is not None], sorted(skipped), fresh)


def _part_request_id(base: str, slots: list[Slot]) -> str:
    """The request id of one command: the same runs under the same request give the same id.

    A retried request plans again without what its first try created, so its commands may
    hold other runs: they get other ids (and a run created meanwhile answers RUN_EXISTS)."""
    dates = ",".join(str(utc_iso(slot.logical_date)) for slot in slots)
    return f"{base[:100]}#{hashlib.sha256(dates.encode()).hexdigest()[:24]}"


def _required_date(request: Any, field: str) -> datetime:
    """A required date in MIN_DATE..MAX_DATE: the timetable maths never overflow."""
    value = bounds.timestamp(request, field, required=True)
    if value is None:  # pragma: no cover - bounds.timestamp raises when required
        raise invalid_argument(field, "", "required: a logical date (UTC timestamp)")
    return value


def _would_be(dag_id: str, slot: Slot, conf: dict[str, Any]) -> DagRun:
    return DagRun(
        dag_id,
        backfill_run_id(slot.logical_date),
        slot.logical_date,
        slot.data_interval_start,
        slot.data_interval_end,
        RunType.MANUAL,
        conf=dict(conf),
    )


def _copy(run: DagRun | None) -> DagRun | None:
    return None if run is None else replace(run)


def _response(
    runs: list[DagRun], skipped: list[datetime], fresh: Any
) -> dag_pb2.BackfillDagResponse:
    return dag_pb2.BackfillDagResponse(
        runs=[convert.dag_run(run) for run in runs],
        skipped=[convert.ts(when) for when in skipped],
        freshness=fresh,
    )
