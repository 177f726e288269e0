"""PoolService: list, set and delete pools (docs/architecture.md §19, README "Pools").

A set or delete is a ``SetPool``/``DeletePool`` command (core/pool_commands.py), checked here
first so the caller gets a one-line INVALID_ARGUMENT naming the field; the core checks again.
The list answers from this node's replica: each pool's slots, the slots its running attempts
hold and the tasks waiting in it, plus default_pool (unlimited while unset) and any pool that
tasks name but nobody created (slots 0: its tasks wait).
"""

from __future__ import annotations

from typing import Any

import grpc

from raftsched.api.gen import pool_pb2, pool_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core import handlers_pools as hp
from raftsched.core import pool_commands as pc
from raftsched.core import results as r
from raftsched.core.pool_table import (
    DEFAULT_POOL,
    MAX_POOL_DESCRIPTION_CHARS,
    MAX_POOL_SLOTS,
    pool_of,
    slots_of,
)
from raftsched.core.results import Result
from raftsched.dags.value_checks import ID_PATTERN
from raftsched.errors import StatusError

Code = grpc.StatusCode
UNLIMITED = -1  # Pool.slots of default_pool while it is not set


def pool_rows(st: Any) -> list[dict[str, Any]]:
    """Every pool as the list shows it (read under the node's lock): default_pool first."""
    queued = st.task_queue.queued_by_pool(DEFAULT_POOL)
    rows: dict[str, dict[str, Any]] = {}
    for pool in st.pools.pools():
        rows[pool.name] = {
            "name": pool.name,
            "slots": pool.slots,
            "description": pool.description,
            "updated_at": pool.updated_at,
        }
    rows.setdefault(
        DEFAULT_POOL,
        {"name": DEFAULT_POOL, "slots": UNLIMITED, "description": "", "updated_at": None},
    )
    for name in queued:  # named by tasks, never created: they wait
        rows.setdefault(name, {"name": name, "slots": 0, "description": "", "updated_at": None})
    for row in rows.values():
        row["running_slots"] = st.pools.used(row["name"])
        row["queued_tasks"] = queued.get(row["name"], 0)
    return sorted(rows.values(), key=lambda row: (row["name"] != DEFAULT_POOL, row["name"]))


def pool_waiting(st: Any, name: str, slots: int = 1) -> str:
    """Why a QUEUED task of pool ``name`` taking ``slots`` slots waits now ("" when its pool
    has room for it): the "waiting" note of ListTaskInstances, as a worker's queue has one
    (§15)."""
    room = st.pools.room(name)
    pool = st.pools.get(name)
    if room is None or room >= slots:
        return ""
    if pool is None:
        return f"pool {name!r} does not exist: create it with `raftsched pools set {name} SLOTS`"
    if slots > pool.slots:
        return f"needs {slots} slots of pool {name!r}, which has {pool.slots}: raise it"
    return f"pool {name!r} is full: {st.pools.used(name)} of {pool.slots} slots in use"


def pool_notes(ctx: ApiContext, record: Any) -> dict[tuple[str, int], str]:
    """Why a queued task waits, by (pool, pool_slots) of the DAG's tasks ("": it need not),
    for ListTaskInstances (``record``: the DAG's, None when it is gone)."""
    wants = {(pool_of(t), slots_of(t)) for t in record.spec.tasks} if record is not None else set()
    if {name for name, _ in wants} <= {DEFAULT_POOL}:  # the common case: nothing to read
        return {}
    notes, _ = ctx.read(lambda st: {want: pool_waiting(st, *want) for want in wants})
    return notes


class PoolServicer(pool_pb2_grpc.PoolServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    @translate_errors
    def ListPools(self, request: Any, context: grpc.ServicerContext) -> Any:
        rows, fresh = self.ctx.read(pool_rows)
        return pool_pb2.ListPoolsResponse(
            pools=[
                pool_pb2.Pool(
                    name=row["name"],
                    slots=row["slots"],
                    running_slots=row["running_slots"],
                    queued_tasks=row["queued_tasks"],
                    description=row["description"],
                    updated_at=convert.ts(row["updated_at"]),
                )
                for row in rows
            ],
            freshness=fresh,
        )

    @translate_errors
    def SetPool(self, request: Any, context: grpc.ServicerContext) -> Any:
        name = _name(request.name)
        if not 0 <= request.slots <= MAX_POOL_SLOTS:
            raise invalid_argument("slots", request.slots, f"expected 0 to {MAX_POOL_SLOTS:,}")
        if len(request.description) > MAX_POOL_DESCRIPTION_CHARS:
            raise invalid_argument(
                "description", request.description, f"at most {MAX_POOL_DESCRIPTION_CHARS}"
            )
        command = self.ctx.make(
            pc.SetPool,
            bounds.request_id(request.request_id),
            name=name,
            slots=int(request.slots),
            description=request.description,
            actor=self.ctx.actor(),
        )
        result = self.ctx.propose(command, context)
        _raise(result, name)
        return pool_pb2.SetPoolResponse(
            changed=result.reason != r.UNCHANGED, freshness=self.ctx.freshness()
        )

    @translate_errors
    def DeletePool(self, request: Any, context: grpc.ServicerContext) -> Any:
        name = _name(request.name)
        command = self.ctx.make(
            pc.DeletePool,
            bounds.request_id(request.request_id),
            name=name,
            actor=self.ctx.actor(),
        )
        _raise(self.ctx.propose(command, context), name)
        return pool_pb2.DeletePoolResponse(freshness=self.ctx.freshness())


def _name(value: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        raise invalid_argument("name", value, "1 to 250 letters, digits, '_', '.' and '-'")
    return value


def _raise(result: Result, name: str) -> None:
    if result.ok:
        return
    if result.reason == hp.UNKNOWN_POOL:
        raise StatusError(Code.NOT_FOUND, f"no pool {name!r}; `raftsched pools list` lists them")
    if result.reason == hp.TOO_MANY_POOLS:
        raise StatusError(Code.RESOURCE_EXHAUSTED, str(result.value))
    if result.reason == r.INVALID:
        raise StatusError(Code.INVALID_ARGUMENT, str(result.value))
    raise StatusError(Code.FAILED_PRECONDITION, f"pool {name}: {result.reason}: {result.value}")


__all__ = ["UNLIMITED", "PoolServicer", "pool_notes", "pool_rows", "pool_waiting"]
