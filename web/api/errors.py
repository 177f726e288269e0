"""Every REST API error is JSON ``{"code": "NOT_FOUND", "message": "..."}`` (plus ``field``
when one request field is to blame, ``fields`` for every invalid field).

``code`` is the gRPC status name the cluster answered (or the nearest one for an error the
webserver finds itself); ``raftsched.errors.HTTP_STATUS`` is the one table from gRPC code to
HTTP status.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from flask import Blueprint, Response, jsonify, request
from raftsched.web.gateway import GatewayError
from werkzeug.exceptions import HTTPException

from raftsched.errors import http_status

log = logging.getLogger(__name__)

# The one table from gRPC code to HTTP status lives with the errors (raftsched.errors).
# An HTTP error the webserver raises itself (routing, parsing) -> the code it is reported as.
_CODE_OF_HTTP: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
# The cluster names the gRPC request field (``conf_json = '...': expected ...``); the REST
# body calls some of them differently.
_FIELD_NAMES = {"conf_json": "conf", "states": "state"}
_REQUEST_FIELDS = frozenset(
    {"dag_id", "run_id", "task_id", "task_ids", "logical_date", "start_date", "end_date"}
    | {"page_size", "page_token", "search", "state", "try_number", "after_seq", "recent_runs"}
    | {"tags", "dry_run"}
    | set(_FIELD_NAMES)
)
# "conf_json = '[1]': expected a JSON object", "conf_json is 70000 bytes long; ...",
# "task_ids[3] = ...": the gRPC request field the message starts with.
_FIELD_PREFIX = re.compile(r"^([a-z_]+)(\[\d+\])?(?: = |\s)")


class ApiProblem(Exception):
    """Raise in a REST view to answer ``code`` (a gRPC status name) with ``message``."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


def status_of(code: str) -> int:
    return http_status(code)


def error_response(
    code: str, message: str, *, status: int | None = None, **extra: Any
) -> tuple[Response, int]:
    body = {"code": code, "message": message, **{k: v for k, v in extra.items() if v}}
    response = jsonify(body)
    status = status or status_of(code)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="raftsched"'
    return response, status


def _from_gateway(err: GatewayError) -> tuple[Response, int]:
    code = err.code or "UNKNOWN"
    message = err.message
    field = None
    match = _FIELD_PREFIX.match(message)
    if match and match.group(1) in _REQUEST_FIELDS and code in ("INVALID_ARGUMENT", "OUT_OF_RANGE"):
        field = _FIELD_NAMES.get(match.group(1), match.group(1))
        message = field + message[len(match.group(1)) :]
    return error_response(code, message, field=field)


def _flatten(messages: Any, prefix: str = "") -> dict[str, list[str]]:
    """webargs' ``{"json": {"conf": ["Not a valid mapping type."]}}`` -> ``{"conf": [...]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(messages, dict):
        for key, value in messages.items():
            if not prefix and key in ("json", "query", "form", "headers", "path", "files"):
                out.update(_flatten(value, ""))
            else:
                out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        out[prefix or "body"] = list(messages)
    elif isinstance(messages, list):
        for i, value in enumerate(messages):
            out.update(_flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix or "body"] = [str(messages)]
    return out


def _from_http(err: HTTPException) -> tuple[Response, int]:
    status = err.code or 500
    code = _CODE_OF_HTTP.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    data = getattr(err, "data", None) or {}
    messages = data.get("messages") or data.get("errors")
    if messages:
        fields = _flatten(messages)
        text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in sorted(fields.items()))
        first = sorted(fields)[0] if fields else None
        return error_response(
            "INVALID_ARGUMENT", text or "invalid request", status=400, field=first, fields=fields
        )
    message = data.get("message") or err.description or err.name
    if status == 405:
        message = f"{request.method} is not allowed on {request.path}"
    return error_response(code, message, status=status)


def register(bp: Blueprint) -> None:
    """JSON errors for everything raised in the blueprint's views."""
    bp.register_error_handler(
        ApiProblem, lambda e: error_response(e.code, e.message, field=e.field)
    )
    bp.register_error_handler(GatewayError, _from_gateway)
    bp.register_error_handler(HTTPException, _from_http)

    def unexpected(err: Exception) -> tuple[Response, int]:
        if isinstance(err, RecursionError):
            return error_response("INVALID_ARGUMENT", "the request body is nested too deeply")
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return error_response("INTERNAL", "something went wrong; the webserver's log has it")

    bp.register_error_handler(Exception, unexpected)
