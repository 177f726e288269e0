"""Where the webserver's settings come from, outside tests.

``create_app()`` without a test config reads the raftsched config (``$RAFTSCHED_CONFIG``, else
``$RAFTSCHED_HOME/raftsched.cfg``; every key overridable by ``RAFTSCHED__SECTION__KEY``):

    [webserver] secret_key    SECRET_KEY: signs session cookies; the same on every webserver
    [webserver] grpc_servers  RAFTSCHED_SERVERS; empty: every [cluster] node's API address
                              (its Raft port + 200)
    [webserver] token         RAFTSCHED_TOKEN: the bearer token sent to the cluster (admin)
    [api] tls_ca              RAFTSCHED_TLS_CA: turns TLS on towards the cluster

Then any Flask setting from ``RAFTSCHED_WEB_<NAME>`` (values parsed as JSON when they can
be), e.g. ``RAFTSCHED_WEB_SESSION_COOKIE_SECURE=true`` behind HTTPS,
``RAFTSCHED_WEB_PROXY_FIX=1`` to trust one proxy's X-Forwarded-* headers, or
``RAFTSCHED_WEB_RAFTSCHED_DEADLINE=3`` for the seconds one page may wait on the cluster, or
``RAFTSCHED_WEB_READ_CACHE_SECONDS=0`` to turn off the read cache (``read_cache.py``: read
answers reused for 0.2 s, never against a caller's read-your-writes index). The login limits
of each process (``login_limits.py``): ``RAFTSCHED_WEB_LOGIN_CLIENT_BURST`` /
``_LOGIN_CLIENT_PER_MINUTE`` (checked logins per client address), ``_LOGIN_USER_BURST`` /
``_LOGIN_USER_PER_MINUTE`` (failed logins per user name), ``_LOGIN_CONCURRENCY`` (password
checks at once).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

DEFAULTS: dict[str, Any] = {
    "SESSION_COOKIE_NAME": "raftsched_session",
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    "PERMANENT_SESSION_LIFETIME": timedelta(hours=12),
    # A form stays valid as long as the session: a page left open over lunch still posts.
    "WTF_CSRF_TIME_LIMIT": 12 * 3600,
    "RAFTSCHED_SERVERS": (),
    "RAFTSCHED_TOKEN": None,
    "RAFTSCHED_TLS_CA": None,
    "RAFTSCHED_DEADLINE": 5.0,
    "RAFTSCHED_HEALTH_TIMEOUT": 2.0,
    "RAFTSCHED_USER_RECHECK_SECONDS": 30.0,
    "DAGS_PAGE_SIZE": 50,
    "GRID_RUNS": 12,
    "PROXY_FIX": False,
    "READ_CACHE_SECONDS": 0.2,  # read_cache.DEFAULT_TTL
    "LOGIN_CLIENT_BURST": 20,
    "LOGIN_CLIENT_PER_MINUTE": 20,
    "LOGIN_USER_BURST": 5,
    "LOGIN_USER_PER_MINUTE": 2,
    "LOGIN_CONCURRENCY": 2,
}


def from_raftsched_config() -> dict[str, Any]:
    """Flask settings from the raftsched config; raises ConfigError when it is bad."""
    from raftsched.addresses import cluster_api_addresses
    from raftsched.config import load_config

    config = load_config()
    web = config.webserver
    return {
        "SECRET_KEY": web.secret_key or None,
        "RAFTSCHED_SERVERS": web.grpc_servers or tuple(cluster_api_addresses(config)),
        "RAFTSCHED_TOKEN": web.token or None,
        "RAFTSCHED_TLS_CA": str(config.api.tls_ca) if config.api.tls_ca else None,
    }
