"""The ``/api/v1`` routes: one flask-smorest blueprint whose schemas make the OpenAPI document.

Every route but ``/health`` and ``/docs`` needs ``Authorization: Bearer <token>``; the token
is forwarded to the cluster, whose token table and roles decide (viewer reads, operator also
pauses, triggers, backfills, clears and marks). See ``upstream.py`` for identity and
consistency, ``errors.py`` for the JSON errors.
The blueprint, its before/after-request hooks and the helpers the routes share are in
``blueprint.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import flask
from flask import Response, current_app, request, stream_with_context
from raftsched.web import audit, workers
from raftsched.web.api import docs, history_schemas, worker_schemas
from raftsched.web.api import schemas as s
from raftsched.web.api.blueprint import bp, errors, paginate, run_out
from raftsched.web.api.calls import follow_task_log
from raftsched.web.api.errors import ApiProblem
from raftsched.web.api.upstream import api_gateway
from raftsched.web.gateway import GatewayError, Unavailable, gateway
from raftsched.web.gateway_backfill import backfill
from raftsched.web.gateway_history import cluster_history
from raftsched.web.gateway_source import dag_source

from raftsched import __version__

# -- DAGs --------------------------------------------------------------------------------------


@bp.route("/dags", methods=["GET"], tags=["DAGs"])
@bp.arguments(s.DagListQuery, location="query", as_kwargs=True)
@bp.response(200, s.DagList)
@errors(400, 403)
def list_dags(**args: Any) -> Any:
    """List DAGs

    Ordered by dag_id, a page at a time (`page_token` = the previous `next_page_token`).
    """
    return api_gateway().list_dags(**args)


@bp.route("/dags/<dag_id>", methods=["GET"], tags=["DAGs"])
@bp.response(200, s.DagDetail)
@errors(403, 404)
def get_dag(dag_id: str) -> Any:
    """Get a DAG, with its tasks"""
    return api_gateway().get_dag(dag_id)


@bp.route("/dags/<dag_id>/explain", methods=["GET"], tags=["DAGs"])
@bp.arguments(s.ExplainQuery, location="query", as_kwargs=True)
@bp.response(200, s.Explanation)
@errors(400, 403)
def explain_slot(dag_id: str, at: Any = None) -> Any:
    """What the cluster decided for the DAG's slot at or before `at` (default: now), and why"""
    return api_gateway().explain(dag_id, at)


@bp.route("/dags/<dag_id>/pause", methods=["POST"], tags=["DAGs"])
@bp.arguments(s.PauseBody, required=False)
@bp.response(200, s.PauseResult)
@errors(400, 403, 404)
def pause_dag(body: dict[str, Any], dag_id: str) -> Any:
    """Pause a DAG (no new scheduled runs; running ones go on), with an optional note saying
    why (shown with the DAG until it is unpaused). Needs operator."""
    return api_gateway().set_paused(dag_id, True, note=body["note"])


@bp.route("/dags/<dag_id>/unpause", methods=["POST"], tags=["DAGs"])
@bp.response(200, s.PauseResult)
@errors(403, 404)
def unpause_dag(dag_id: str) -> Any:
    """Unpause a DAG. Needs operator."""
    return api_gateway().set_paused(dag_id, False)


@bp.route("/dags/<dag_id>/runs", methods=["POST"], tags=["Runs"])
@bp.arguments(s.TriggerBody, required=False)
@bp.response(201, s.Run)
@errors(400, 403, 404, 409)
def trigger_dag(body: dict[str, Any], dag_id: str) -> Any:
    """Trigger a run, with a conf. Needs operator.

    409 ALREADY_EXISTS if the run id or the logical date is taken.
    """
    run = api_gateway().trigger(
        dag_id, body["conf"], run_id=body["run_id"], logical_date=body["logical_date"]
    )
    return run_out(run)


@bp.route("/dags/<dag_id>/backfill", methods=["POST"], tags=["Runs"])
@bp.arguments(s.BackfillBody)
@bp.response(200, s.BackfillResult)
@errors(400, 403, 404, 409)
def backfill_dag(body: dict[str, Any], dag_id: str) -> Any:
    """Backfill: a run for every schedule slot from start_date to end_date (both included)
    that has none yet. Needs operator. `dry_run`: only say which."""
    found = backfill(
        api_gateway(),
        dag_id,
        body["start_date"],
        body["end_date"],
        body["conf"],
        dry_run=body["dry_run"],
    )
    return {"runs": [run_out(r) for r in found["runs"]], "skipped": found["skipped"]}


# -- runs and task instances ------------------------------------------------------------------


@bp.route("/runs", methods=["GET"], tags=["Runs"])
@bp.arguments(s.RunListQuery, location="query", as_kwargs=True)
@bp.response(200, s.RunList)
@errors(400, 403)
def list_runs(dag_id: str, state: list[str], page_size: int, page_token: str) -> Any:
    """List runs of every DAG (or of `dag_id`), newest logical date first"""
    return _runs(dag_id, state, page_size, page_token)


def _runs(dag_id: str, state: list[str], page_size: int, page_token: str) -> dict[str, Any]:
    found = api_gateway().list_runs(
        dag_id, states=state, page_size=page_size, page_token=page_token
    )
    runs = [run_out(r) for r in found["runs"]]
    return {"runs": runs, "next_page_token": found["next_page_token"]}


@bp.route("/dags/<dag_id>/runs", methods=["GET"], tags=["Runs"])
@bp.arguments(s.DagRunListQuery, location="query", as_kwargs=True)
@bp.response(200, s.RunList)
@errors(400, 403)
def list_dag_runs(dag_id: str, state: list[str], page_size: int, page_token: str) -> Any:
    """List one DAG's runs, newest logical date first"""
    return _runs(dag_id, state, page_size, page_token)


@bp.route("/dags/<dag_id>/runs/<run_id>", methods=["GET"], tags=["Runs"])
@bp.response(200, s.Run)
@errors(403, 404)
def get_run(dag_id: str, run_id: str) -> Any:
    """Get a run"""
    return run_out(api_gateway().task_instances(dag_id, run_id)["run"])


@bp.route("/dags/<dag_id>/runs/<run_id>/task-instances", methods=["GET"], tags=["Task instances"])
@bp.arguments(s.Page, location="query", as_kwargs=True)
@bp.response(200, s.TaskInstanceList)
@errors(400, 403, 404)
def list_task_instances(dag_id: str, run_id: str, page_size: int, page_token: str) -> Any:
    """List a run's task instances (the current attempt of each task), by task_id"""
    found = api_gateway().task_instances(dag_id, run_id)
    page, token = paginate(found["task_instances"], page_size, page_token)
    return {"run": run_out(found["run"]), "task_instances": page, "next_page_token": token}


@bp.route("/dags/<dag_id>/runs/<run_id>/clear", methods=["POST"], tags=["Task instances"])
@bp.arguments(s.ClearBody, required=False)
@bp.response(200, s.ClearResult)
@errors(400, 403, 404, 409)
def clear_tasks(body: dict[str, Any], dag_id: str, run_id: str) -> Any:
    """Clear (rerun) tasks of a run, optionally with everything downstream. Needs operator."""
    cleared = api_gateway().clear(
        dag_id, run_id, body["task_ids"], downstream=body["include_downstream"]
    )
    return {"cleared_task_ids": cleared}


@bp.route("/dags/<dag_id>/runs/<run_id>/mark", methods=["POST"], tags=["Task instances"])
@bp.arguments(s.MarkBody)
@bp.response(200, s.MarkResult)
@errors(400, 403, 404, 409)
def mark_tasks(body: dict[str, Any], dag_id: str, run_id: str) -> Any:
    """Mark tasks of a run success or failed (a live lease is revoked). Needs operator."""
    marked = api_gateway().mark(dag_id, run_id, body["task_ids"], body["state"])
    return {"marked_task_ids": marked}


@bp.route(
    "/dags/<dag_id>/runs/<run_id>/task-instances/<task_id>/logs",
    methods=["GET"],
    tags=["Task instances"],
)
@bp.arguments(s.LogQuery, location="query", as_kwargs=True)
@bp.response(200, s.LogPage)
@bp.alt_response(
    200,
    content_type="application/x-ndjson",
    description="with follow=true: one LogChunk per line, then"
    ' {"end": true, "reason": "finished"|"timeout"|"error", "last_seq": N}',
    success=True,
)
@errors(400, 403, 404)
def task_log(
    dag_id: str,
    run_id: str,
    task_id: str,
    try_number: int,
    after_seq: int,
    limit: int,
    follow: bool,
    timeout: float,
) -> Any:
    """A task attempt's log (stored chunks after `after_seq`), or, with `follow`, a stream"""
    gw = api_gateway()
    chunks = gw.task_log(
        dag_id, run_id, task_id, try_number=try_number, after_seq=after_seq, limit=limit
    )
    if not follow:
        last = chunks[-1]["seq"] if chunks else after_seq
        return {"chunks": chunks, "last_seq": last, "more": len(chunks) >= limit}
    attempt = try_number or (chunks[0]["try_number"] if chunks else 0)
    dump = s.LogChunk().dump

    def lines() -> Iterator[str]:
        last = after_seq
        for chunk in chunks:
            last = chunk["seq"]
            yield json.dumps(dump(chunk)) + "\n"
        end: dict[str, Any] = {"end": True, "reason": "finished"}
        try:
            for chunk in follow_task_log(
                gw, dag_id, run_id, task_id, try_number=attempt, after_seq=last, timeout=timeout
            ):
                last = chunk["seq"]
                yield json.dumps(dump(chunk)) + "\n"
        except Unavailable as err:
            if err.code == "DEADLINE_EXCEEDED":
                end["reason"] = "timeout"
            else:
                end.update(reason="error", code=err.code, message=err.message)
        except GatewayError as err:
            end.update(reason="error", code=err.code, message=err.message)
        end["last_seq"] = last
        yield json.dumps(end) + "\n"

    return Response(
        stream_with_context(lines()),
        mimetype="application/x-ndjson",
        headers={"X-Accel-Buffering": "no"},  # nginx: pass each line on at once
    )


# -- import errors, cluster, health -----------------------------------------------------------


@bp.route("/import-errors", methods=["GET"], tags=["Cluster"])
@bp.arguments(s.Page, location="query", as_kwargs=True)
@bp.response(200, s.ImportErrorList)
@errors(400, 403)
def list_import_errors(page_size: int, page_token: str) -> Any:
    """DAG files that failed to load, by file"""
    page, token = paginate(api_gateway().import_errors(), page_size, page_token)
    return {"import_errors": page, "next_page_token": token}


@bp.route("/cluster", methods=["GET"], tags=["Cluster"])
@bp.response(200, s.ClusterStatus)
@errors(403)
def cluster_status() -> Any:
    """Each node's role, term, commit and applied index, lag, DB watermark and backlog"""
    return api_gateway().cluster_status()


@bp.route("/cluster/history", methods=["GET"], tags=["Cluster"])
@bp.response(200, history_schemas.ClusterHistory)
@errors(403)
def cluster_history_route() -> Any:
    """Each node's recent events (leader changes, elections, membership) and samples (commit
    latency, apply lag), as kept in its memory"""
    return cluster_history(api_gateway())


@bp.route("/dags/<dag_id>/source", methods=["GET"], tags=["DAGs"])
@bp.response(200, history_schemas.DagSource)
@errors(403, 404)
def dag_source_route(dag_id: str) -> Any:
    """The DAG's file as a node has it (at most 512 KiB), with the spec hash of what was parsed"""
    return dag_source(api_gateway(), dag_id)


@bp.route("/workers", methods=["GET"], tags=["Cluster"])
@bp.response(200, worker_schemas.WorkerList)
@errors(403)
def list_workers() -> Any:
    """Live workers (host, pid, version, queues, slots, running attempts, last call) and those
    lost in the last 10 minutes, with why"""
    return workers.list_workers(api_gateway())


@bp.route("/audit", methods=["GET"], tags=["Cluster"])
@bp.arguments(worker_schemas.AuditQuery, location="query", as_kwargs=True)
@bp.response(200, worker_schemas.AuditList)
@errors(400, 403)
def list_audit(**args: Any) -> Any:
    """Who triggered, paused, cleared, marked, backfilled or changed a variable or connection,
    and when, newest first (`before_id`: the last id of the previous page). Needs admin."""
    return {"records": audit.list_audit(api_gateway(), **args)}


@bp.route("/health", methods=["GET"], tags=["Cluster"])
@bp.doc(security=[])
@bp.response(200, s.Health)
@bp.alt_response(503, schema=s.Health, description="no leader with a quorum is reachable")
def health() -> Any:
    """200 when a leader with a quorum is reachable, else 503; with this webserver's raftsched
    version. No token needed."""
    timeout = float(current_app.config["RAFTSCHED_HEALTH_TIMEOUT"])
    try:
        status = gateway().cluster_status(timeout=timeout)  # the webserver's own view
        error = "" if status["leader"] else "no node reports a leader with a quorum"
    except Unavailable as err:
        status, error = {"leader": None, "newest_heartbeat": None}, err.message
    body = {
        "status": "ok" if status["leader"] else "unavailable",
        "leader": status["leader"],
        "newest_heartbeat": status["newest_heartbeat"],
        "error": error,
        "version": __version__,
    }
    return body, 200 if status["leader"] else 503


# -- outside the OpenAPI document ------------------------------------------------------------


def unknown_route(path: str) -> Any:
    raise ApiProblem(
        "NOT_FOUND", f"no REST route {request.method} /api/v1/{path}; see /api/v1/openapi.json"
    )


_ALL = ["GET", "POST", "PUT", "PATCH", "DELETE"]
flask.Blueprint.add_url_rule(bp, "/docs", "docs", docs.docs, methods=["GET"])
flask.Blueprint.add_url_rule(bp, "/<path:path>", "unknown_route", unknown_route, methods=_ALL)
