"""Fencing a task's own writes to an external system (docs/fencing-side-effects.md).

Every attempt runs under a lease whose fencing token is the Raft log index that granted it
(docs/architecture.md §4.2), and the worker hands it to the task (``RAFTSCHED_FENCING_TOKEN``,
``{{ fencing_token }}``). A retry's lease is granted by a later entry, so its token is larger
than any earlier attempt's. The cluster refuses a stale attempt's heartbeats and outcome; what
the attempt writes elsewhere only that system can refuse. The two recipes below do so: each
write carries the token and is applied only when the token already stored is older, so an
attempt that woke after its lease was given away (a frozen VM, a long GC pause, a partition)
cannot overwrite its retry's result.

- :func:`upsert_fenced`: a SQL table keyed by what is written, with a ``fencing_token``
  column: one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement; the row count says
  whether it was applied (PostgreSQL, SQLite >= 3.24).
- :func:`write_file_fenced`: a file whose first line holds the token of its writer, replaced
  by a rename under an exclusive lock after comparing tokens.

Both return True when the write was applied and False when a newer (or equal) token was there:
a refusal is the recipe working, not an error, and the caller decides (usually: stop, the
attempt is no longer the task's).
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from raftsched.errors import NoFencingToken

ENV_NAME = "RAFTSCHED_FENCING_TOKEN"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def current_token(environ: dict[str, str] | None = None) -> int:
    """The running attempt's fencing token (NoFencingToken outside an attempt)."""
    text = (os.environ if environ is None else environ).get(ENV_NAME, "")
    return _checked(text)


def _checked(value: object) -> int:
    try:
        token = int(str(value))
    except ValueError:
        raise NoFencingToken(str(value)[:40]) from None
    if token <= 0:
        raise NoFencingToken(str(value)[:40])
    return token


def upsert_sql(table: str) -> str:
    """The fenced upsert for ``table`` (key text primary key, value, fencing_token bigint).
    The ``WHERE`` of ``DO UPDATE`` makes a conflicting row with a newer or equal token a
    no-op: zero rows affected."""
    if not _IDENTIFIER.fullmatch(table):  # a name, never SQL: it is spliced into the text
        raise ValueError(f"not a plain table name: {table[:70]!r}")
    return (
        f"INSERT INTO {table} (key, value, fencing_token) VALUES (:key, :value, :token)"
        f" ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,"
        f" fencing_token = EXCLUDED.fencing_token"
        f" WHERE {table}.fencing_token < EXCLUDED.fencing_token"
    )


def upsert_fenced(connection: Any, table: str, key: str, value: str, token: int) -> bool:
    """Write ``value`` under ``key`` with ``token`` in one statement on a SQLAlchemy
    ``Connection`` (the caller commits); True when the row was inserted or updated."""
    from sqlalchemy import text  # the worker's tasks need not import SQLAlchemy otherwise

    params = {"key": key, "value": value, "token": _checked(token)}
    result = connection.execute(text(upsert_sql(table)), params)
    return result.rowcount == 1


def read_file_token(path: Path) -> int:
    """The token stored in ``path``'s first line (0: no file yet)."""
    try:
        with path.open("rb") as f:
            first = f.readline(32)
    except FileNotFoundError:
        return 0
    try:
        return int(first)
    except ValueError:
        return 0  # not written by this recipe: any token may replace it


def write_file_fenced(path: Path, data: bytes, token: int) -> bool:
    """Replace ``path`` with ``data`` (after a first line holding ``token``) unless the file
    holds a newer or equal token. Write to a temporary file first, then, holding an exclusive
    ``flock`` on ``<path>.lock``, compare and rename: a reader sees the old file or the new
    one, and two writers cannot both win the comparison. For an object store use its
    conditional write (an ETag or generation precondition) the same way: read the token and
    the ETag, compare, write only if the ETag is unchanged."""
    token = _checked(token)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"%d\n" % token)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(f"{path}.lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the lock file closes
            if read_file_token(path) >= token:
                return False
            os.replace(tmp, path)
            tmp = ""
            return True
    finally:
        if tmp:
            Path(tmp).unlink(missing_ok=True)


def read_file_data(path: Path) -> bytes:
    """What :func:`write_file_fenced` stored (without the token line)."""
    return Path(path).read_bytes().partition(b"\n")[2]
