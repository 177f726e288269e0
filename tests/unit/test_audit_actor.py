"""Who the audit log names for a call (api/auth.py): a token's configured name, else its role
and identity; "<user> via <name>" only from an admin token (the webserver's), the user name
bounded and sanitized; ``[api] token_names`` refuses what is not name=identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched import config_schema as s
from raftsched.api.auth import (
    MAX_USER_CHARS,
    USER_METADATA,
    Role,
    TokenTable,
    acting_as,
    caller_scope_of,
)
from raftsched.core import limits as lim


def test_a_token_is_named_by_config_else_by_role_and_identity() -> None:
    ci = caller_scope_of("ci-secret")
    table = TokenTable([("ci-secret", Role.OPERATOR), ("x", Role.VIEWER)], [(ci, "ci")])
    assert table.name_of(ci, Role.OPERATOR) == "ci"
    other = caller_scope_of("x")
    assert table.name_of(other, Role.VIEWER) == f"viewer token {other}"
    assert "x" not in table.name_of(other, Role.VIEWER).split()  # never the token


def test_only_an_admin_token_speaks_for_a_user() -> None:
    meta = [(USER_METADATA, "alice")]
    assert acting_as("web", Role.ADMIN, meta) == "alice via web"
    for role in (Role.OPERATOR, Role.VIEWER, Role.WORKER):
        assert acting_as("ci", role, meta) == "ci"
    assert acting_as("web", Role.ADMIN, []) == "web"
    assert acting_as("web", Role.ADMIN, [(USER_METADATA, "   ")]) == "web"


@pytest.mark.parametrize(
    "user",
    ["al\x1b[31mice", "a\nb\r\x00c", "x" * 10_000, "\u0085nel", "ok-ünïcode"],
)
def test_a_hostile_user_name_is_bounded_and_printable(user: str) -> None:
    actor = acting_as("web", Role.ADMIN, [(USER_METADATA, user.encode())])
    assert actor.endswith(" via web")
    name = actor.removesuffix(" via web")
    assert 0 < len(name) <= MAX_USER_CHARS
    assert lim.ACTOR_PATTERN.fullmatch(actor) and len(actor) <= lim.MAX_ACTOR_CHARS


def test_token_names_setting() -> None:
    scope = caller_scope_of("t")
    assert s.token_names(f"ci={scope}, web.1={scope}", Path()) == ((scope, "ci"), (scope, "web.1"))
    for bad in ("ci", f"ci={scope}x", "c i=c0123456789", f"{'n' * 65}={scope}", "=c0123456789"):
        with pytest.raises(ValueError, match="name=identity"):
            s.token_names(bad, Path())
