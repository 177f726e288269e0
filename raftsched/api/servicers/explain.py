"""DagService.ExplainSlot: what the cluster decided for one slot of a DAG, and why.

The verdict is the pure core's (:mod:`raftsched.core.explain`); this gathers what it reads:
the DAG's committed record and its file's import error from the node's read view, the run on
the slot from the view (live runs) or else the DB, and the DB's oldest run of the DAG (how far
back the answer can see). The DB down: the answer is the live state's, and says the history
is out of sight.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc

from raftsched import clock
from raftsched.api.gen import dag_pb2
from raftsched.api.servicers import bounds
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.convert import ts
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core import explain as ex
from raftsched.core.model import DagRun
from raftsched.core.timetable import timetable_for
from raftsched.errors import StoreUnavailable
from raftsched.store import queries


class ExplainSlot:
    """Mixed into ``DagServicer`` (its ``ctx``)."""

    ctx: ApiContext

    @translate_errors
    def ExplainSlot(self, request: Any, context: grpc.ServicerContext) -> Any:
        dag_id = bounds.ident("dag_id", request.dag_id)
        if not dag_id:
            raise invalid_argument("dag_id", dag_id, "must not be empty")
        now = clock.now()
        at = bounds.timestamp(request, "at") or now
        view = self.ctx.view()
        record = view.dag(dag_id)
        files = {e.fileloc: e for e in view.import_errors}
        if record is not None:
            error = files.get(record.spec.fileloc)
        else:  # an unknown DAG: the error of a file named like it, if any
            error = next((e for e in files.values() if _names(e.fileloc, dag_id)), None)
        slot = _slot(record, at)
        run, since, db_note = None, None, ""
        if slot is not None:
            run = next((r for r in view.runs_of(dag_id) if r.logical_date == slot), None)
        engine = self.ctx.engine
        older = None
        if engine is not None and record is not None:
            try:
                since = _oldest(engine, dag_id)
                if run is None and slot is not None:
                    run = _at(engine, dag_id, slot)
                if run is None and slot is not None:
                    older = queries.skipped_range(engine, dag_id, slot)
            except StoreUnavailable:
                db_note = " (the DB is unreachable: its history is out of sight)"
        answer = ex.explain(
            record,
            at,
            now,
            run=run,
            import_error=error,
            history_from=since,
            older_skip=older,
        )
        out = dag_pb2.ExplainSlotResponse(
            verdict=answer.verdict,
            detail=answer.detail + db_note,
            run_id=answer.run_id,
            freshness=self.ctx.view_freshness(view),
        )
        if answer.slot is not None:
            out.slot.CopyFrom(ts(answer.slot))
        if since is not None:
            out.history_from.CopyFrom(ts(since))
        return out


def _names(fileloc: str, dag_id: str) -> bool:
    return fileloc.rsplit("/", 1)[-1].removesuffix(".py") == dag_id


def _slot(record: Any, at: datetime) -> datetime | None:
    if record is None:
        return None
    try:
        found = timetable_for(record.spec).latest_slot(at)
    except ValueError:
        return None
    return None if found is None else found.logical_date


def _oldest(engine: Any, dag_id: str) -> datetime | None:
    return queries.oldest_run_date(engine, dag_id)


def _at(engine: Any, dag_id: str, slot: datetime) -> DagRun | None:
    return queries.run_at(engine, dag_id, slot)
