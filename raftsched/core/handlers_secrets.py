"""Handlers for variables and connections: set (create, replace, compare-and-set) and delete.

The state holds each value as a Fernet token only (``commands.SetSecret``): the API node that
took the request encrypted it, and decrypts only for an admin who asks to reveal it or for a
worker that holds the lease of a task declaring it. So the Raft log, the journal files, the
snapshots and the digest see ciphertext, never a value.

The table joins the digest (one :func:`fp_secret` per entry) and the snapshot only when it has
entries: a state that never had a variable digests and snapshots exactly as before.
Not written to the metadata DB: the Raft state is the only store (no outbox entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import limits as lim
from raftsched.core import results as r
from raftsched.core.model import parse_utc, utc_iso
from raftsched.core.results import Result

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# Reasons of these commands (stable strings, like those of core.results)
UNKNOWN_SECRET = "unknown_secret"  # delete of a name that is not set
TOO_MANY_SECRETS = "too_many_secrets"  # a new name past lim.MAX_SECRETS

SecretKey = tuple[str, str]  # (kind, key)


@dataclass(frozen=True, slots=True)
class SecretRecord:
    ciphertext: str  # a Fernet token
    description: str
    updated_at: datetime


def fp_secret(key: SecretKey, record: SecretRecord) -> str:
    return "secret:" + dg.canonical((key[0], key[1], record))


def apply_set_secret(state: SchedulerState, cmd: c.SetSecret, now: datetime, index: int) -> Result:
    ref = (cmd.kind, cmd.key)
    old = state._secrets.get(ref)
    if cmd.expected is not None and (old is None or old.ciphertext != cmd.expected):
        return Result(False, r.STATE_CHANGED, cmd.key)  # changed (or deleted) since it was read
    if old is None and len(state._secrets) >= lim.MAX_SECRETS:
        return Result(False, TOO_MANY_SECRETS, f"at most {lim.MAX_SECRETS} variables/connections")
    if old is not None and (old.ciphertext, old.description) == (cmd.ciphertext, cmd.description):
        return Result(True, r.UNCHANGED, cmd.key)
    new = SecretRecord(cmd.ciphertext, cmd.description, now)
    if old is not None:
        state._sum.remove(fp_secret(ref, old))
    state._secrets[ref] = new
    state._sum.add(fp_secret(ref, new))
    return Result(True, "", cmd.key)


def apply_delete_secret(
    state: SchedulerState, cmd: c.DeleteSecret, now: datetime, index: int
) -> Result:
    ref = (cmd.kind, cmd.key)
    old = state._secrets.get(ref)
    if old is None:
        return Result(False, UNKNOWN_SECRET, cmd.key)
    state._sum.remove(fp_secret(ref, old))
    del state._secrets[ref]
    return Result(True, "", cmd.key)


# -- snapshot ------------------------------------------------------------------------------


def secrets_to_list(table: dict[SecretKey, SecretRecord]) -> list[list[Any]]:
    return [
        [kind, key, rec.ciphertext, rec.description, utc_iso(rec.updated_at)]
        for (kind, key), rec in table.items()
    ]


def secrets_from_list(items: Any) -> dict[SecretKey, SecretRecord]:
    out: dict[SecretKey, SecretRecord] = {}
    for kind, key, ciphertext, description, updated_at in items or ():
        when = parse_utc(updated_at)
        assert when is not None
        out[(str(kind), str(key))] = SecretRecord(str(ciphertext), str(description), when)
    return out
