"""The gateway's calls about a DAG's schedule: pause and unpause (with a note), and "why did
(or didn't) this slot run" (``ExplainSlot``). Mixed into :class:`raftsched.web.gateway.Gateway`
(its ``_call``)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from raftsched.web.view_models import dag_dict

from raftsched.api.gen import dag_pb2
from raftsched.api.wire import when


class DagSchedule:
    def _call(self, service: str, method: str, request: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # Gateway's

    def explain(self, dag_id: str, at: Any = None) -> dict[str, Any]:
        request = dag_pb2.ExplainSlotRequest(dag_id=dag_id)
        if at is not None:
            request.at.FromDatetime(at.astimezone(UTC))
        answer = self._call("dags", "ExplainSlot", request)
        return {
            "verdict": answer.verdict,
            "detail": answer.detail,
            "slot": when(answer, "slot"),
            "run_id": answer.run_id,
            "history_from": when(answer, "history_from"),
        }

    def set_paused(self, dag_id: str, paused: bool, *, note: str = "") -> dict[str, Any]:
        if paused:
            request = dag_pb2.PauseDagRequest(dag_id=dag_id, note=note)
            response = self._call("dags", "PauseDag", request)
        else:
            request = dag_pb2.UnpauseDagRequest(dag_id=dag_id)
            response = self._call("dags", "UnpauseDag", request)
        return {"dag": dag_dict(response.dag), "changed": response.changed}
