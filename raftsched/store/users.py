"""Users of the web UI and API: salted password hashes and roles.

Hashes come from werkzeug's ``generate_password_hash`` (scrypt, random salt, the method and
parameters stored in the hash, so they can be raised later without breaking old hashes).
Passwords are never logged or returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Engine
from werkzeug.security import check_password_hash, generate_password_hash

from raftsched.errors import UserError
from raftsched.store import tables as t
from raftsched.store.engine import translate_errors

ROLES = ("admin", "operator", "viewer", "worker")


@cache
def _dummy_hash() -> str:
    """Checked when the user does not exist: a wrong name takes as long as a wrong password."""
    return generate_password_hash("raftsched-no-such-user")


@dataclass(frozen=True, slots=True)
class User:
    username: str
    role: str
    created_at: datetime


def create_user(
    engine: Engine, username: str, password: str, role: str, *, replace: bool = False
) -> User:
    """Store a user with a salted hash of ``password``.

    Raises UserError for an unknown role, an empty name or password, or an existing username
    (unless ``replace``: then its password and role are replaced).
    """
    if role not in ROLES:
        raise UserError(
            f"unknown role {role!r} for user {username!r}: use one of {', '.join(ROLES)}",
            username=username,
        )
    if not username or not password:
        raise UserError("username and password must not be empty", username=username)
    row = {
        "username": username,
        "password_hash": generate_password_hash(password),
        "role": role,
        "created_at": datetime.now(UTC),
    }
    table = t.users
    try:
        with translate_errors(engine), engine.begin() as conn:
            if replace:
                conn.execute(sa.delete(table).where(table.c.username == username))
            conn.execute(sa.insert(table).values(row))
    except exc.IntegrityError as err:
        raise UserError(
            f"user {username!r} exists already; choose another name or replace it",
            username=username,
        ) from err
    return User(username=username, role=role, created_at=row["created_at"])


def verify_user(engine: Engine, username: str, password: str) -> str | None:
    """The user's role if ``password`` is right, else None (unknown user or wrong password)."""
    found = password_hash(engine, username)
    if found is None:
        check_password_hash(_dummy_hash(), password)
        return None
    stored, role = found
    return role if check_password_hash(stored, password) else None


def password_hash(engine: Engine, username: str) -> tuple[str, str] | None:
    """(the stored password hash, the role) of ``username``, or None when there is no such
    user. For the webserver, which checks passwords itself (``check_password_hash``)."""
    table = t.users
    with translate_errors(engine), engine.connect() as conn:
        found = conn.execute(
            sa.select(table.c.password_hash, table.c.role).where(table.c.username == username)
        ).one_or_none()
    return None if found is None else (found.password_hash, found.role)


def list_users(engine: Engine) -> list[User]:
    table = t.users
    with translate_errors(engine), engine.connect() as conn:
        rows = conn.execute(
            sa.select(table.c.username, table.c.role, table.c.created_at).order_by(table.c.username)
        ).all()
    return [User(username=r.username, role=r.role, created_at=r.created_at) for r in rows]


def delete_user(engine: Engine, username: str) -> bool:
    """Delete a user; True if one was deleted, False when none had that name."""
    table = t.users
    with translate_errors(engine), engine.begin() as conn:
        deleted = conn.execute(sa.delete(table).where(table.c.username == username)).rowcount
    return bool(deleted)
