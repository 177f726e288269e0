"""The ``/api/v1`` routes: one flask-smorest blueprint whose schemas make the OpenAPI document.

Every route but ``/health`` and ``/docs`` needs ``Authorization: Bearer <token>``; the token
is forwarded to the cluster, whose token table and roles decide (viewer reads, operator also
pauses, triggers, backfills, clears and marks). See ``upstream.py`` for identity and
consistency, ``errors.py`` for the JSON errors.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import flask
from flask import Response, current_app, g, request, stream_with_context
from flask_smorest import Blueprint as SmorestBlueprint
from raftsched.web.api import docs
from raftsched.web.api import schemas as s
from raftsched.web.api.errors import ApiProblem, register
from raftsched.web.api.upstream import (
    APPLIED_INDEX_HEADER,
    CONSISTENCY_HEADER,
    MIN_INDEX_HEADER,
    Caller,
    api_gateway,
    parse_consistency,
    parse_min_index,
)
from raftsched.web.gateway import (
    GatewayError,
    Unavailable,
    backfill,
    follow_task_log,
    gateway,
)
from webargs.flaskparser import FlaskParser

from raftsched.api.client import SeenIndex

F = TypeVar("F", bound=Callable[..., Any])


class _Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400  # an invalid field is a 400 INVALID_ARGUMENT, as from gRPC


class Blueprint(SmorestBlueprint):
    ARGUMENTS_PARSER = _Parser()


bp = Blueprint(
    "api_v1",
    __name__,
    url_prefix="/api/v1",
    description="raftsched REST API: DAGs, runs, task instances, logs, cluster",
)
register(bp)

PUBLIC_ENDPOINTS = frozenset({"api_v1.health", "api_v1.docs", "api_v1.unknown_route"})
MAX_BODY_BYTES = 1024 * 1024
_TOKEN = re.compile(r"^[\x21-\x7e]{1,4096}$")  # what gRPC metadata can carry
TOKEN_HELP = (
    "send 'Authorization: Bearer <token>' with a token of the cluster's [api] viewer_tokens,"
    " operator_tokens or admin_tokens"
)

_ERRORS = {
    400: "invalid request: the field is named in `field`",
    401: "no or unknown bearer token",
    403: "the token's role may not do this",
    404: "no such DAG, run or task",
    409: "refused in the current state (e.g. the run id exists)",
    503: "no scheduler node could answer: retry",
}


def errors(*statuses: int) -> Callable[[F], F]:
    """Document JSON error answers (the Error schema) of an operation."""

    def decorate(view: F) -> F:
        for status in (401, 503, *statuses):
            view = bp.alt_response(status, schema=s.ApiError, description=_ERRORS[status])(view)
        return view

    return decorate


# -- every request -----------------------------------------------------------------------------


@bp.before_request
def authenticate() -> None:
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise ApiProblem("PAYLOAD_TOO_LARGE", f"the body is over {MAX_BODY_BYTES} bytes")
    if request.endpoint in PUBLIC_ENDPOINTS:
        return
    if request.method == "POST" and request.content_length and not request.is_json:
        raise ApiProblem(
            "UNSUPPORTED_MEDIA_TYPE",
            f"the body is {request.mimetype or 'untyped'}: send JSON (Content-Type:"
            " application/json)",
        )
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiProblem("UNAUTHENTICATED", f"missing bearer token: {TOKEN_HELP}")
    if not _TOKEN.match(token):
        raise ApiProblem("UNAUTHENTICATED", f"malformed bearer token: {TOKEN_HELP}")
    try:
        seen = parse_min_index(request.headers.get(MIN_INDEX_HEADER))
    except ValueError as err:
        raise ApiProblem("INVALID_ARGUMENT", str(err), field=MIN_INDEX_HEADER) from None
    try:
        consistency = parse_consistency(request.headers.get(CONSISTENCY_HEADER))
    except ValueError as err:
        raise ApiProblem("INVALID_ARGUMENT", str(err), field=CONSISTENCY_HEADER) from None
    g.api_caller = Caller(token, SeenIndex(seen), consistency)
    return reused_body()


def _body_key() -> tuple[str, str, str] | None:
    """A GET's key in the read cache (web/read_cache.py): token and path with query."""
    caller: Caller | None = g.get("api_caller")
    if request.method != "GET" or caller is None or caller.consistency:
        return None
    return ("REST", caller.token, request.full_path)


def reused_body() -> Response | None:
    """The JSON body this token got for this GET a moment ago, when its data is at least at
    the caller's X-Raftsched-Min-Index (read_cache.py); None: ask the cluster."""
    key = _body_key()
    if key is None:
        return None
    hit = api_gateway().cache.get(key, g.api_caller.seen.value)
    if hit is None:
        return None
    index, body = hit
    g.api_caller.seen.observe(index)
    return current_app.response_class(body, status=200, mimetype="application/json")


def remember_body(response: Response) -> None:
    indexes = g.get("api_data_indexes") or [0]
    key = _body_key()
    if key is None or response.status_code != 200 or response.is_streamed or min(indexes) <= 0:
        return
    if response.mimetype == "application/json":
        api_gateway().cache.put_value(key, min(indexes), response.get_data())


@bp.after_request
def stamp(response: Response) -> Response:
    remember_body(response)
    caller: Caller | None = g.get("api_caller")
    if caller is not None and caller.seen.value:
        response.headers[APPLIED_INDEX_HEADER] = str(caller.seen.value)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


# -- helpers -----------------------------------------------------------------------------------


def run_out(run: dict[str, Any]) -> dict[str, Any]:
    """A gateway run dict with its conf as an object, not JSON text."""
    out = dict(run)
    try:
        out["conf"] = json.loads(run.get("conf_json") or "{}")
    except ValueError:
        out["conf"] = {}
    return out


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(token.encode() + b"==").decode().partition(":")
        if kind != "o" or not value.isdigit():
            raise ValueError(token)
        return int(value)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiProblem(
            "INVALID_ARGUMENT",
            "page_token: not a token this API gave out; pass next_page_token as it came",
            field="page_token",
        ) from None


def paginate(items: list[Any], page_size: int, page_token: str) -> tuple[list[Any], str]:
    """A page of a list the cluster answers whole, with an opaque offset token."""
    start = _offset(page_token)
    page = items[start : start + page_size]
    end = start + len(page)
    token = base64.urlsafe_b64encode(f"o:{end}".encode()).decode().rstrip("=")
    return page, token if end < len(items) else ""


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


@bp.route("/dags/<dag_id>/pause", methods=["POST"], tags=["DAGs"])
@bp.response(200, s.PauseResult)
@errors(403, 404)
def pause_dag(dag_id: str) -> Any:
    """Pause a DAG (no new scheduled runs; running ones go on). Needs operator."""
    return api_gateway().set_paused(dag_id, True)


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


@bp.route("/health", methods=["GET"], tags=["Cluster"])
@bp.doc(security=[])
@bp.response(200, s.Health)
@bp.alt_response(503, schema=s.Health, description="no leader with a quorum is reachable")
def health() -> Any:
    """200 when a leader with a quorum is reachable, else 503. No token needed."""
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
