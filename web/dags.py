"""The DAG list (search, filter, paging, pause toggles, live run marks) and the DAG page
(grid of recent runs x tasks, dependency graph), with their JSON endpoints."""

from __future__ import annotations

from typing import Any

from flask import (
    Blueprint,
    current_app,
    flash,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from raftsched.web import graph, grid
from raftsched.web.auth import login_required, role_required
from raftsched.web.gateway import gateway

bp = Blueprint("dags", __name__)

FILTERS = {"all": None, "active": False, "paused": True}


def _query() -> dict[str, Any]:
    status = request.args.get("status", "all")
    return {
        "search": request.args.get("search", "").strip()[:200],
        "status": status if status in FILTERS else "all",
        "page_token": request.args.get("page_token", ""),
        "prev": request.args.getlist("prev"),
    }


def _page(query: dict[str, Any]) -> dict[str, Any]:
    return gateway().list_dags(
        search=query["search"],
        paused=FILTERS[query["status"]],
        page_size=current_app.config["DAGS_PAGE_SIZE"],
        page_token=query["page_token"],
        recent_runs=10,
    )


@bp.get("/")
def index() -> Any:
    return redirect(url_for("dags.list_page"))


@bp.get("/dags")
@login_required
def list_page() -> Any:
    query = _query()
    return render_template("dags/list.html", page=_page(query), query=query)


@bp.get("/dags.json")
@login_required
def list_json() -> Any:
    page = _page(_query())
    return jsonify(
        dags=[
            {
                "dag_id": d["dag_id"],
                "paused": d["paused"],
                "next_run": d["next_run"],
                "recent_runs": d["recent_runs"],
            }
            for d in page["dags"]
        ],
        total_size=page["total_size"],
        next_page_token=page["next_page_token"],
    )


def _grid_runs() -> int:
    default = current_app.config["GRID_RUNS"]
    try:
        return max(1, min(int(request.args.get("runs", default)), 100))
    except ValueError:
        return default


@bp.get("/dags/<dag_id>")
@login_required
def detail(dag_id: str) -> Any:
    dag = gateway().get_dag(dag_id)
    shape = graph.layout(dag["tasks"])
    dag["tasks"] = graph.topological(dag["tasks"])
    runs_shown = _grid_runs()
    cells = grid.build(gateway(), dag_id, shape.order, runs_shown)
    return render_template(
        "dags/detail.html", dag=dag, graph=shape, grid=cells, runs_shown=runs_shown
    )


@bp.get("/dags/<dag_id>/grid.json")
@login_required
def grid_json(dag_id: str) -> Any:
    dag = gateway().get_dag(dag_id)
    cells = grid.build(gateway(), dag_id, graph.layout(dag["tasks"]).order, _grid_runs())
    return jsonify(dag_id=dag_id, paused=dag["paused"], next_run=dag["next_run"], **cells)


@bp.post("/dags/<dag_id>/pause")
@role_required("operator")
def pause(dag_id: str) -> Any:
    paused = request.form.get("paused", "1") == "1"
    result = gateway().set_paused(dag_id, paused)
    word = "paused" if paused else "unpaused"
    flash(f"DAG {dag_id} {word}." if result["changed"] else f"DAG {dag_id} was already {word}.")
    return redirect(_back(url_for("dags.detail", dag_id=dag_id)))


@bp.post("/dags/<dag_id>/paused.json")
@role_required("operator")
def paused_json(dag_id: str) -> Any:
    body = request.get_json(silent=True) or {}
    if not isinstance(body.get("paused"), bool):
        return jsonify(error='expected a JSON body {"paused": true|false}'), 400
    result = gateway().set_paused(dag_id, body["paused"])
    return jsonify(dag_id=dag_id, paused=result["dag"]["paused"], changed=result["changed"])


def _back(default: str) -> str:
    from raftsched.web.auth import safe_next

    target = request.form.get("next", "")
    return safe_next(target) if target else default
