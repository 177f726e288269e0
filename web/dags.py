"""The DAG list (search, filter, paging, pause toggles, live run marks) and the DAG page
(grid of recent runs x tasks, dependency graph), with their JSON endpoints."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime
from html import escape
from typing import Any

from flask import (
    Blueprint,
    current_app,
    flash,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from flask_wtf.csrf import generate_csrf
from raftsched.web import charts, cron_text, graph, grid
from raftsched.web.auth import has_role, login_required, role_required
from raftsched.web.gateway import dag_dict, gateway
from raftsched.web.templating import link_maker

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


def _page(query: dict[str, Any], *, with_answer: bool = False) -> dict[str, Any]:
    return gateway().list_dags(
        search=query["search"],
        paused=FILTERS[query["status"]],
        page_size=current_app.config["DAGS_PAGE_SIZE"],
        page_token=query["page_token"],
        recent_runs=10,
        with_answer=with_answer,
    )


@bp.get("/")
def index() -> Any:
    return redirect(url_for("dags.list_page"))


@bp.get("/dags")
@login_required
def list_page() -> Any:
    query = _query()
    page = _page(query, with_answer=True)
    return render_template("dags/list.html", page=page, query=query, rows=_rows(page, query))


class _RowsCache:
    """The list's rows as HTML, per cluster answer (the gateway's read cache hands out the
    same answer object while it keeps it), role and URL: the rows were most of the page's
    CPU, and every viewer of the list within the read cache's TTL sees the same ones. The
    CSRF token, different per session, is filled in afterwards. Thread-safe, bounded."""

    MAX_ENTRIES = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, bool, str], tuple[Any, str]] = OrderedDict()

    def get(self, answer: Any, key: tuple[int, bool, str]) -> str | None:
        with self._lock:
            entry = self._entries.get(key)
        # The answer object itself is kept in the entry, so its id cannot be reused meanwhile.
        return entry[1] if entry is not None and entry[0] is answer else None

    def put(self, answer: Any, key: tuple[int, bool, str], html: str) -> None:
        with self._lock:
            self._entries[key] = (answer, html)
            self._entries.move_to_end(key)
            while len(self._entries) > self.MAX_ENTRIES:
                self._entries.popitem(last=False)


_CSRF_HOLE = "RaftschedCsrfTokenHole"


def _rows(page: dict[str, Any], query: dict[str, Any]) -> str:
    """The rows' HTML (the template marks it safe: Jinja rendered it, escaping included)."""
    is_operator = has_role(g.user, "operator")
    here = request.full_path
    answer = page.get("answer")
    cache: _RowsCache = current_app.extensions.setdefault("raftsched_rows", _RowsCache())
    key = (id(answer), is_operator, here)
    html = cache.get(answer, key) if answer is not None else None
    if html is None:
        if page["dags"] is None:
            page["dags"] = [dag_dict(d) for d in answer.dags]
        _add_links(page["dags"])
        html = render_template(
            "dags/_rows.html",
            page=page,
            query=query,
            is_operator=is_operator,
            here=here,
            csrf_value=_CSRF_HOLE if is_operator else "",
        )
        if answer is not None:
            cache.put(answer, key, html)
    if is_operator:
        html = html.replace(_CSRF_HOLE, escape(generate_csrf(), quote=True))
    return html


ROW_LINKS = {
    "detail": "dags.detail",
    "pause": "dags.pause",
    "paused_json": "dags.paused_json",
    "trigger": "runs.trigger",
}


def _add_links(dags: list[dict[str, Any]]) -> None:
    """Each row's links, made here by string joins rather than by url_for in the template
    (a quarter of the page's CPU; see templating.link_maker)."""
    makers = {name: (end, link_maker(end, "dag_id")) for name, end in ROW_LINKS.items()}
    run_link = link_maker("runs.detail", "dag_id", "run_id")
    for dag in dags:
        dag_id = dag["dag_id"]
        dag["links"] = {
            name: make(dag_id) if make else url_for(end, dag_id=dag_id)
            for name, (end, make) in makers.items()
        }
        for run in dag["recent_runs"]:
            run["url"] = (
                run_link(dag_id, run["run_id"])
                if run_link
                else url_for("runs.detail", dag_id=dag_id, run_id=run["run_id"])
            )


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
    cells = grid.build(gateway(), dag_id, shape.order, runs_shown, dag.get("skipped"))
    dag["schedule_words"] = cron_text.describe(dag)
    explained = _explained(dag_id, request.args.get("explain_at"))
    return render_template(
        "dags/detail.html",
        dag=dag,
        graph=shape,
        grid=cells,
        runs_shown=runs_shown,
        run_durations=charts.run_durations(cells["runs"]),
        task_durations=charts.task_durations(cells),
        schedule_delays=charts.schedule_delays(cells["runs"]),
        explained=explained,
    )


def _explained(dag_id: str, at_text: str | None) -> dict[str, Any] | None:
    """``?explain_at=TIME`` (empty: now): the cluster's answer for that slot, or the error."""
    if at_text is None:
        return None
    at = None
    if at_text.strip():
        try:
            at = datetime.fromisoformat(at_text.strip()[:64])
        except ValueError:
            return {"verdict": "error", "detail": f"{at_text[:64]!r} is not an ISO time"}
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return gateway().explain(dag_id, at)


@bp.get("/dags/<dag_id>/grid.json")
@login_required
def grid_json(dag_id: str) -> Any:
    dag = gateway().get_dag(dag_id)
    order = graph.layout(dag["tasks"]).order
    cells = grid.build(gateway(), dag_id, order, _grid_runs(), dag.get("skipped"))
    return jsonify(dag_id=dag_id, paused=dag["paused"], next_run=dag["next_run"], **cells)


@bp.post("/dags/<dag_id>/pause")
@role_required("operator")
def pause(dag_id: str) -> Any:
    paused = request.form.get("paused", "1") == "1"
    note = request.form.get("note", "")[:1000] if paused else ""
    result = gateway().set_paused(dag_id, paused, note=note)
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
