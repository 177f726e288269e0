"""Runs: the list of every DAG's runs, a run's page (its task instances, live), triggering a
run with a conf, and clearing or marking its tasks."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, render_template, request, url_for
from raftsched.web import charts
from raftsched.web.auth import login_required, role_required
from raftsched.web.forms import TriggerForm, parse_conf, parse_logical_date
from raftsched.web.gateway import Refused, gateway

bp = Blueprint("runs", __name__)

RUN_STATES = ("queued", "running", "success", "failed")
ACTIONS = {"clear": None, "mark_success": "success", "mark_failed": "failed"}


@bp.get("/runs")
@login_required
def list_page() -> Any:
    state = request.args.get("state", "")
    dag_id = request.args.get("dag_id", "").strip()
    page = gateway().list_runs(
        dag_id,
        states=[state] if state in RUN_STATES else [],
        page_size=50,
        page_token=request.args.get("page_token", ""),
    )
    query = {
        "state": state,
        "dag_id": dag_id,
        "prev": request.args.getlist("prev"),
        "page_token": request.args.get("page_token", ""),
    }
    return render_template("runs/list.html", page=page, query=query, states=RUN_STATES)


@bp.get("/dags/<dag_id>/runs/<run_id>")
@login_required
def detail(dag_id: str, run_id: str) -> Any:
    found = gateway().task_instances(dag_id, run_id)
    chart = charts.gantt(found["task_instances"])
    return render_template("runs/detail.html", dag_id=dag_id, gantt=chart, **found)


@bp.get("/dags/<dag_id>/runs/<run_id>/state.json")
@login_required
def state_json(dag_id: str, run_id: str) -> Any:
    found = gateway().task_instances(dag_id, run_id)
    return jsonify(**found)


@bp.route("/dags/<dag_id>/trigger", methods=["GET", "POST"])
@role_required("operator")
def trigger(dag_id: str) -> Any:
    dag = gateway().get_dag(dag_id)  # 404 before showing a form for a DAG that is not there
    form = TriggerForm()
    if form.validate_on_submit():
        try:
            run = gateway().trigger(
                dag_id,
                parse_conf(form.conf.data or ""),
                run_id=form.run_id.data or "",
                logical_date=parse_logical_date(form.logical_date.data or ""),
            )
        except Refused as err:
            form.form_errors.append(err.message)
        else:
            flash(f"Triggered {dag_id}: run {run['run_id']}.", "success")
            return redirect(url_for("runs.detail", dag_id=dag_id, run_id=run["run_id"]))
    status = 400 if request.method == "POST" else 200
    return render_template("dags/trigger.html", dag=dag, form=form), status


@bp.post("/dags/<dag_id>/runs/<run_id>/act")
@role_required("operator")
def act(dag_id: str, run_id: str) -> Any:
    action = request.form.get("action", "")
    if action not in ACTIONS:
        return render_template(
            "error.html", title="Bad request", message=f"unknown action {action!r}", status=400
        ), 400
    task_ids = [t for t in request.form.getlist("task_id") if t]
    back = url_for("runs.detail", dag_id=dag_id, run_id=run_id)
    if request.form.get("next", "").startswith("/"):
        from raftsched.web.auth import safe_next

        back = safe_next(request.form["next"])
    try:
        if action == "clear":
            downstream = request.form.get("downstream") in ("1", "on", "true")
            done = gateway().clear(dag_id, run_id, task_ids, downstream=downstream)
            what = "cleared"
        else:
            if not task_ids:
                found = gateway().task_instances(dag_id, run_id)["task_instances"]
                task_ids = [ti["task_id"] for ti in found]
            done = gateway().mark(dag_id, run_id, task_ids, ACTIONS[action] or "")
            what = f"marked {ACTIONS[action]}"
    except Refused as err:
        flash(f"Refused: {err.message}", "error")
        return redirect(back)
    if done:
        flash(f"{len(done)} task(s) {what}: {', '.join(done)}.", "success")
    else:
        flash(f"Nothing {what}: the tasks already were in that state.", "info")
    return redirect(back)
