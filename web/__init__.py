"""The raftsched webserver: a stateless Flask app that reaches the cluster only over gRPC.

    gunicorn 'raftsched.web:create_app()'      (what `raftsched webserver` runs)
    flask --app 'raftsched.web:create_app()' run --debug

``create_app(test_config=None)`` follows the flaskr shape: settings (``settings.py``), the
gateway to the cluster (``gateway.py``), CSRF protection on every POST, the metrics hooks,
then one blueprint per area. Sessions are signed cookies (``SECRET_KEY``, the same on every
instance), so any webserver can serve any request.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from flask import Flask
from flask_wtf.csrf import CSRFProtect

from raftsched.errors import ConfigError

csrf = CSRFProtect()


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    from raftsched.web import (
        asset_pages,
        audit,
        auth,
        backfill,
        cluster,
        code_view,
        dags,
        gateway,
        handlers,
        health,
        import_errors,
        metrics,
        pools,
        runs,
        secret_pages,
        settings,
        tasks,
        templating,
        users,
        workers,
    )

    app = Flask(__name__)
    app.config.from_mapping(settings.DEFAULTS)
    if test_config is None:
        app.config.from_mapping(settings.from_raftsched_config())
        app.config.from_prefixed_env("RAFTSCHED_WEB")
    else:
        app.config.from_mapping(test_config)
    _check_secret(app)
    if app.config["PROXY_FIX"]:
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=1)  # type: ignore[method-assign]

    csrf.init_app(app)
    gateway.init_app(app)
    templating.init_app(app)
    handlers.init_app(app)
    metrics.init_app(app)
    blueprints = (
        auth,
        dags,
        code_view,
        runs,
        backfill,
        tasks,
        cluster,
        workers,
        pools,
        import_errors,
        users,
        secret_pages,
        audit,
        asset_pages,
    )
    for module in (*blueprints, health):
        app.register_blueprint(module.bp)
    csrf.exempt(health.bp)
    from raftsched.web import api  # the REST API, /api/v1 (bearer tokens, no CSRF)

    api.init_app(app, csrf)
    return app


def _check_secret(app: Flask) -> None:
    if app.config.get("SECRET_KEY"):
        return
    if app.config.get("TESTING"):
        app.config["SECRET_KEY"] = secrets.token_urlsafe(32)
        return
    raise ConfigError(
        "[webserver] secret_key is empty: set it (the same on every webserver, e.g."
        " RAFTSCHED__WEBSERVER__SECRET_KEY=\"$(python -c 'import secrets;"
        " print(secrets.token_urlsafe(32))')\"); it signs the session cookies",
        key="webserver.secret_key",
    )
