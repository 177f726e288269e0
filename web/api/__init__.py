"""The REST API, ``/api/v1`` (README "REST API"; web/README.md lists the routes).

A flask-smorest blueprint on the same stateless webserver as the pages, reaching the cluster
the same way (through ``raftsched.web.gateway``), but as its caller: every request carries
``Authorization: Bearer <token>``, which the webserver forwards to the cluster, so the
cluster's own token table and roles apply (``upstream.py``). The OpenAPI 3 document is
generated from the schemas (``schemas.py``) at ``/api/v1/openapi.json``; ``/api/v1/docs`` shows
it as a plain HTML page that needs nothing from the internet (``docs.py``).

    create_app() -> raftsched.web.api.init_app(app, csrf)
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask_smorest import Api
from raftsched.web.api.schemas import ApiError

API_VERSION = "v1"
PREFIX = "/api/v1"
CONFIG_PREFIX = "RAFTSCHED_REST"  # flask-smorest's settings, e.g. RAFTSCHED_REST_OPENAPI_...

DESCRIPTION = (
    "Every route but /health needs 'Authorization: Bearer <token>': a token of the cluster's"
    " [api] viewer_tokens (read), operator_tokens (also pause, trigger, backfill, clear, mark)"
    " or admin_tokens. Errors are JSON {code, message[, field]}, code being the gRPC status"
    " name. Lists take page_size and page_token (the previous answer's next_page_token)."
    " Every answer carries X-Raftsched-Applied-Index; send the highest you have seen back as"
    " X-Raftsched-Min-Index for read-your-writes across webservers and nodes"
    " (X-Raftsched-Consistency: linearizable for a linearizable read)."
)


class RestApi(Api):
    """flask-smorest's Api without its app-wide HTTPException handler: the pages keep their
    HTML errors; the blueprint has its own JSON handlers (``errors.py``)."""

    ERROR_SCHEMA = ApiError  # the error answers' schema in the document

    def _register_error_handlers(self) -> None:
        return None


def init_app(app: Flask, csrf: Any) -> RestApi:
    from raftsched.web.api import asset_routes, docs, pool_routes, routes, upstream

    del asset_routes, pool_routes  # their routes are on routes.bp

    app.config.setdefault(f"{CONFIG_PREFIX}_OPENAPI_URL_PREFIX", PREFIX)
    app.config.setdefault(f"{CONFIG_PREFIX}_OPENAPI_JSON_PATH", "openapi.json")
    api = RestApi(
        app,
        config_prefix=CONFIG_PREFIX,
        spec_kwargs={
            "title": "raftsched REST API",
            "version": API_VERSION,
            "openapi_version": "3.0.3",
            "info": {"description": DESCRIPTION},
            "security": [{"bearerAuth": []}],
        },
    )
    api.spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer", "description": "a cluster API token"}
    )
    api.register_blueprint(routes.bp)
    csrf.exempt(routes.bp)
    upstream.init_app(app)
    app.extensions[docs.EXTENSION] = api
    return api
