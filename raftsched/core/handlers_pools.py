"""Handlers of the pool commands (``core/pool_commands.py``): set and delete a pool.

The table is ``core/pool_table.PoolTable``; the lease path (``handlers_tasks``) asks it for
room before each grant. Each change also goes to the metadata DB as a POOL outbox entry (the
pool as it is now; ``slots`` None: deleted), so ``cluster rebuild --from-db`` restores the
pools: only from cluster version 3 (``core.persisted``), which the gate already demands of
these commands.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import limits as lim
from raftsched.core import persisted
from raftsched.core import pool_commands as pc
from raftsched.core import results as r
from raftsched.core import versions as vs
from raftsched.core.changes import emit_entry
from raftsched.core.limits import check_id, check_int, check_text
from raftsched.core.model import OutboxKind, utc_iso
from raftsched.core.pool_table import (
    MAX_POOL_DESCRIPTION_CHARS,
    MAX_POOL_SLOTS,
    MAX_POOLS,
    Pool,
)
from raftsched.core.results import Result
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# An entry of a later release may add fields to these: they take their defaults (§12)
vs.install_tolerant_unpickling((pc,))

UNKNOWN_POOL = "unknown_pool"  # delete of a pool that does not exist
TOO_MANY_POOLS = "too_many_pools"  # a new pool past MAX_POOLS


def pool_row(name: str, pool: Pool | None, now: datetime) -> dict[str, Any]:
    """The POOL outbox entry's data (``slots`` None: the pool was deleted)."""
    return {
        "name": name,
        "slots": None if pool is None else pool.slots,
        "description": "" if pool is None else pool.description,
        "updated_at": utc_iso(now if pool is None else pool.updated_at),
    }


def emit_pool(state: SchedulerState, name: str, pool: Pool | None, now: datetime) -> None:
    if persisted.persists(state):
        emit_entry(state, OutboxKind.POOL, pool_row(name, pool, now))


def apply_set_pool(state: SchedulerState, cmd: pc.SetPool, now: datetime, index: int) -> Result:
    old = state.pools.get(cmd.name)
    if old is None and len(state.pools) >= MAX_POOLS:
        return Result(False, TOO_MANY_POOLS, f"at most {MAX_POOLS} pools")
    if old is not None and (old.slots, old.description) == (cmd.slots, cmd.description):
        return Result(True, r.UNCHANGED, cmd.name)
    pool = Pool(cmd.name, cmd.slots, cmd.description, now)
    state.pools.put(pool)
    emit_pool(state, cmd.name, pool, now)
    return Result(True, "", cmd.name)


def apply_delete_pool(
    state: SchedulerState, cmd: pc.DeletePool, now: datetime, index: int
) -> Result:
    if state.pools.get(cmd.name) is None:
        return Result(False, UNKNOWN_POOL, cmd.name)
    state.pools.delete(cmd.name)
    emit_pool(state, cmd.name, None, now)
    return Result(True, "", cmd.name)


def _check_actor(cmd: Any) -> None:
    """Who asked (core/audit.py): printable only, as validate's other actors."""
    check_text("actor", cmd.actor, lim.MAX_ACTOR_CHARS)
    if not lim.ACTOR_PATTERN.fullmatch(cmd.actor):
        raise LimitExceeded("actor", "must hold no control characters")


def _check_set(cmd: pc.SetPool) -> None:
    check_id("name", cmd.name)
    check_int("slots", cmd.slots, 0, MAX_POOL_SLOTS)
    check_text("description", cmd.description, MAX_POOL_DESCRIPTION_CHARS)
    _check_actor(cmd)


def _check_delete(cmd: pc.DeletePool) -> None:
    check_id("name", cmd.name)
    _check_actor(cmd)


CHECKS: dict[type, Callable[[Any], None]] = {pc.SetPool: _check_set, pc.DeletePool: _check_delete}
HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    pc.SetPool: apply_set_pool,
    pc.DeletePool: apply_delete_pool,
}
