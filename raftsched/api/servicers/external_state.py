"""WorkerService.ExternalRunState: what an ``external`` trigger (ExternalTaskSensor, on a
triggerer) asks the cluster about another DAG's run (docs/architecture.md §17).

Only a triggerer that holds the live lease of a trigger may ask (the lease is checked on this
replica, then once more after catching up, as ResolveSecrets does): a worker token alone does
not read the runs of every DAG. The run is found by its logical date among the live runs of
the replica's read view, else in the metadata DB (a finished run that left the replica); its
tasks' states are the live task instances', else the DB's last attempt of each.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from raftsched.api.gen import worker_pb2
from raftsched.api.servicers import bounds
from raftsched.api.status import translate_errors
from raftsched.core.model import TaskKey, TaskState
from raftsched.errors import StatusError, StoreUnavailable
from raftsched.store import queries

MAX_TASK_IDS = 100


class ExternalStateRpcs:
    """Mixed into ``WorkerServicer`` (which provides ``ctx``)."""

    ctx: Any

    @translate_errors
    def ExternalRunState(self, request: Any, context: grpc.ServicerContext) -> Any:
        triggerer_id = bounds.ident("triggerer_id", request.triggerer_id)
        key = bounds.key(request.ref)
        token = bounds.token("ref.token", request.ref.token)
        dag_id = bounds.ident("dag_id", request.dag_id)
        if not request.HasField("logical_date"):
            raise StatusError(grpc.StatusCode.INVALID_ARGUMENT, "logical_date is required")
        logical = request.logical_date.ToDatetime(tzinfo=UTC)
        if len(request.task_ids) > MAX_TASK_IDS:
            raise StatusError(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_TASK_IDS} task_ids per call"
            )
        task_ids = [bounds.ident(f"task_ids[{i}]", t) for i, t in enumerate(request.task_ids)]
        if not self._holds(key, token, triggerer_id):
            self.ctx.read_index(context)  # granted after this replica's state: catch up once
            if not self._holds(key, token, triggerer_id):
                raise StatusError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"no live trigger lease of {key.dag_id}/{key.run_id}/{key.task_id} with"
                    f" token {token} held by {triggerer_id}; drop the trigger",
                )
        found = self._live(dag_id, logical, task_ids) or self._stored(dag_id, logical, task_ids)
        if found is None:
            return worker_pb2.ExternalRunStateResponse(found=False)
        run_state, states = found
        return worker_pb2.ExternalRunStateResponse(
            found=True, run_state=run_state, task_states=[states.get(t, "") for t in task_ids]
        )

    def _holds(self, key: TaskKey, token: int, triggerer_id: str) -> bool:
        def look(st: Any) -> bool:
            trigger = st.triggers.get(key)
            return (
                trigger is not None
                and trigger.token == token
                and trigger.triggerer_id == triggerer_id
            )

        held, _ = self.ctx.read(look)
        return bool(held)

    def _live(
        self, dag_id: str, logical: datetime, task_ids: list[str]
    ) -> tuple[str, dict[str, str]] | None:
        view = self.ctx.view()
        run = next((r for r in view.runs_of(dag_id) if r.logical_date == logical), None)
        if run is None:
            return None
        states = {
            ti.key.task_id: str(ti.state)
            for ti in view.task_instances(dag_id, run.run_id)
            if ti.key.task_id in task_ids
        }
        return str(run.state), states

    def _stored(
        self, dag_id: str, logical: datetime, task_ids: list[str]
    ) -> tuple[str, dict[str, str]] | None:
        engine = self.ctx.engine
        if engine is None:
            return None
        try:
            run = queries.run_at(engine, dag_id, logical)
            if run is None:
                return None
            states: dict[str, str] = {}
            for task_id in task_ids:
                rows = queries.list_task_instances(engine, dag_id, run.run_id, task_id=task_id)
                states[task_id] = str(rows[-1].state) if rows else str(TaskState.NONE)
        except StoreUnavailable:
            raise StatusError(
                grpc.StatusCode.UNAVAILABLE,
                "the metadata DB is unavailable and the run is not live; the triggerer asks again",
            ) from None
        return str(run.state), states
