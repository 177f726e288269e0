"""Handlers for variables and connections: set (create, replace, compare-and-set) and delete.

The state holds each value as a Fernet token only (``commands.SetSecret``): the API node that
took the request encrypted it, and decrypts only for an admin who asks to reveal it or for a
worker that holds the lease of a task declaring it or reading it on demand (``secret_reads``),
of a DAG it is not restricted away from (``SetSecret.dags``, ``secret_policy``). So the Raft
log, the journal files, the snapshots and the digest see ciphertext, never a value.

The table (``secret_table.SecretTable``) joins the digest (one ``fp_secret`` per entry) and the
snapshot only when it has entries: a state that never had a variable digests and snapshots
exactly as before.
Each change also goes to the metadata DB as a SECRET outbox entry, ciphertext as it is here
(``core.persisted``), so ``cluster rebuild --from-db`` restores it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core import persisted
from raftsched.core import results as r
from raftsched.core.results import Result
from raftsched.core.secret_table import (
    SecretKey,
    SecretRecord,
    fp_secret,
    secrets_from_list,
    secrets_to_list,
)

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

__all__ = [
    "TOO_MANY_SECRETS",
    "UNKNOWN_SECRET",
    "SecretKey",
    "SecretRecord",
    "apply_delete_secret",
    "apply_set_secret",
    "fp_secret",
    "secrets_from_list",
    "secrets_to_list",
]

# Reasons of these commands (stable strings, like those of core.results)
UNKNOWN_SECRET = "unknown_secret"  # delete of a name that is not set
TOO_MANY_SECRETS = "too_many_secrets"  # a new name past lim.MAX_SECRETS


def apply_set_secret(state: SchedulerState, cmd: c.SetSecret, now: datetime, index: int) -> Result:
    ref = (cmd.kind, cmd.key)
    old = state.secrets.get(ref)
    if cmd.expected is not None and (old is None or old.ciphertext != cmd.expected):
        return Result(False, r.STATE_CHANGED, cmd.key)  # changed (or deleted) since it was read
    if old is None and len(state.secrets) >= lim.MAX_SECRETS:
        return Result(False, TOO_MANY_SECRETS, f"at most {lim.MAX_SECRETS} variables/connections")
    dags = getattr(cmd, "dags", ())  # absent in entries written by older releases
    if old is not None and (old.ciphertext, old.description, old.dags) == (
        cmd.ciphertext,
        cmd.description,
        dags,
    ):
        return Result(True, r.UNCHANGED, cmd.key)
    record = SecretRecord(cmd.ciphertext, cmd.description, now, dags)
    state.secrets.put(ref, record)
    persisted.emit_secret(state, ref, record, now)
    return Result(True, "", cmd.key)


def apply_delete_secret(
    state: SchedulerState, cmd: c.DeleteSecret, now: datetime, index: int
) -> Result:
    ref = (cmd.kind, cmd.key)
    if state.secrets.get(ref) is None:
        return Result(False, UNKNOWN_SECRET, cmd.key)
    state.secrets.delete(ref)
    persisted.emit_secret(state, ref, None, now)
    return Result(True, "", cmd.key)
