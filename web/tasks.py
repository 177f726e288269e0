"""A task instance's page: its attempts, actions, and a log view that follows a running
attempt (static/app.js polls ``log.json`` with ``after_seq``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request
from raftsched.web.auth import login_required
from raftsched.web.gateway import FINISHED_TASK_STATES, NotFound, gateway
from raftsched.web.rendered import rendered_fields

bp = Blueprint("tasks", __name__)

LOG_CHUNKS_PER_POLL = 500


def _instance(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    found = gateway().task_instances(dag_id, run_id)
    for ti in found["task_instances"]:
        if ti["task_id"] == task_id:
            return {"run": found["run"], "ti": ti}
    raise NotFound(f"task {task_id!r} not found in run {run_id!r} of DAG {dag_id!r}")


def _int_arg(name: str, default: int = 0) -> int:
    try:
        return max(0, int(request.args.get(name, default)))
    except ValueError:
        return default


@bp.get("/dags/<dag_id>/runs/<run_id>/tasks/<task_id>")
@login_required
def detail(dag_id: str, run_id: str, task_id: str) -> Any:
    found = _instance(dag_id, run_id, task_id)
    ti = found["ti"]
    try_number = _int_arg("try", ti["try_number"]) or ti["try_number"]
    return render_template(
        "runs/task.html",
        dag_id=dag_id,
        run=found["run"],
        ti=ti,
        try_number=try_number,
        tries=range(1, max(ti["try_number"], 1) + 1),
        rendered=_rendered(dag_id, found["run"], task_id, try_number),
    )


def _rendered(dag_id: str, run: dict[str, Any], task_id: str, try_number: int) -> Any:
    try:
        dag = gateway().get_dag(dag_id)
    except NotFound:  # the DAG is gone: nothing to render from
        return None
    return rendered_fields(dag, run, task_id, try_number)


@bp.get("/dags/<dag_id>/runs/<run_id>/tasks/<task_id>/log.json")
@login_required
def log_json(dag_id: str, run_id: str, task_id: str) -> Any:
    """Chunks after ``after_seq`` of attempt ``try`` (0: the latest), and whether more can
    come: ``done`` is true once that attempt is over (the page then stops polling)."""
    ti = _instance(dag_id, run_id, task_id)["ti"]
    try_number = _int_arg("try") or ti["try_number"]
    after_seq = _int_arg("after_seq")
    chunks = []
    if try_number:
        chunks = gateway().task_log(
            dag_id,
            run_id,
            task_id,
            try_number=try_number,
            after_seq=after_seq,
            limit=LOG_CHUNKS_PER_POLL,
        )
    live = try_number == ti["try_number"] and ti["state"] not in FINISHED_TASK_STATES
    more = len(chunks) >= LOG_CHUNKS_PER_POLL
    return jsonify(
        try_number=try_number,
        state=ti["state"],
        chunks=[{"seq": c["seq"], "stream": c["stream"], "text": c["text"]} for c in chunks],
        last_seq=chunks[-1]["seq"] if chunks else after_seq,
        more=more,
        done=not live and not more,
    )
