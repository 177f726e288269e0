"""What the user sees when something goes wrong: a page (or JSON), never a traceback.

- the cluster unreachable -> the page's banner "the scheduler cluster is unreachable: ...", 503
- an unknown DAG, run or task (NOT_FOUND from the cluster, or no such URL) -> 404 page
- no right to do it -> 403; a POST without a valid CSRF token -> 400
- a refusal nobody caught (e.g. FAILED_PRECONDITION) -> 400 with the cluster's message
JSON endpoints (paths ending in ``.json``, or JSON requests) get ``{"error": ...}`` instead.
"""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from raftsched.web.gateway import NotFound, Refused, Unavailable
from werkzeug.exceptions import HTTPException

log = logging.getLogger(__name__)

UNREACHABLE = "the scheduler cluster is unreachable"


def wants_json() -> bool:
    return request.path.endswith(".json") or request.is_json


def _answer(status: int, title: str, message: str, **extra: object) -> tuple[Response | str, int]:
    if wants_json():
        return jsonify(error=message, title=title, **extra), status
    return render_template(
        "error.html", title=title, message=message, status=status, **extra
    ), status


def init_app(app: Flask) -> None:
    @app.errorhandler(Unavailable)
    def unavailable(err: Unavailable) -> tuple[Response | str, int]:
        banner = f"{UNREACHABLE}: {err.message}"
        return _answer(503, "Cluster unreachable", banner, cluster_error=banner)

    @app.errorhandler(NotFound)
    def not_found(err: NotFound) -> tuple[Response | str, int]:
        return _answer(404, "Not found", err.message)

    @app.errorhandler(Refused)
    def refused(err: Refused) -> tuple[Response | str, int]:
        return _answer(400, "Refused by the cluster", err.message)

    @app.errorhandler(CSRFError)
    def csrf_error(err: CSRFError) -> tuple[Response | str, int]:
        message = (
            f"{err.description} The form expired or did not come from this site: reload the"
            " page and try again."
        )
        return _answer(400, "Form refused", message)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> tuple[Response | str, int]:
        status = err.code or 500
        return _answer(status, f"{status} {err.name}", err.description or err.name)

    @app.errorhandler(Exception)
    def unexpected(err: Exception) -> tuple[Response | str, int]:
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return _answer(500, "Internal error", "Something went wrong; the webserver's log has it.")
