"""Which user a page's call acts for: the pages call the cluster with this webserver's admin
token, so the audit log (raftsched/core/audit.py) would name only the token; calls that change
what it records also name the logged-in user (``x-raftsched-user``, honoured from admin
tokens only, bounded and sanitized by ``api/auth.py``), recorded as "<user> via <token>"."""

from __future__ import annotations

from typing import Any

from flask import g, has_request_context

from raftsched.api.auth import USER_METADATA

# The calls that change what the audit log records
AUDITED_CALLS = frozenset(
    {
        *("PauseDag", "UnpauseDag", "TriggerDag", "BackfillDag", "ClearTasks", "MarkTasks"),
        *("SetSecret", "DeleteSecret", "SetPool", "DeletePool"),
    }
)


def web_user() -> str:
    """The logged-in user's name ("" outside a page request)."""
    if not has_request_context():
        return ""
    user = g.get("user")
    return str(user.get("username") or "") if isinstance(user, dict) else ""


def with_user(method: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's keyword arguments, with the user's metadata when ``method`` is audited."""
    user = web_user() if method in AUDITED_CALLS else ""
    if user:
        kwargs.setdefault("metadata", ((USER_METADATA, user),))
    return kwargs
