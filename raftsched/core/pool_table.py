"""The pool table: named slot counts that bound how many attempts of their tasks run at once
(Airflow's pools; docs/architecture.md §19).

Owns the pools by name (what an operator set: slots, description, when) and, derived from
the running set, the slots each pool's RUNNING attempts hold. A task names its pool
(``TaskSpec.pool``, "" for ``default_pool``) and how many slots one attempt takes
(``TaskSpec.pool_slots``, 1). Guarantees:

- the slots in use of a pool are the sum of ``pool_slots`` of its RUNNING task instances, as
  each took them when its lease was granted (:meth:`occupy`, :meth:`release`, called by
  ``transitions.set_state`` on every move into or out of RUNNING: an outcome, an expiry, a
  release, a deferral, a clear or mark that revokes the lease); so it is rebuilt with the
  running set on restore and is the same on every replica at the same index;
- :meth:`room` is how many more slots a pool grants now: ``slots`` minus those in use (never
  below 0: a pool shrunk under its running tasks grants nothing until they end); None for
  ``default_pool`` while no operator has set it (unlimited, so DAGs without pools run as
  before); 0 for a pool that does not exist (its tasks stay queued, as in Airflow);
- each pool's fingerprint (:func:`fp_pool`) is in the shared digest sum exactly while it is
  held; the table joins the snapshot (``"pools"``) only when it holds one, so a state that
  never had a pool digests and snapshots as before. The usage is derived: in neither.

Raises ``KeyError`` from :meth:`delete` of a pool not held (the handler checks first).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.model import TaskKey, TaskSpec, parse_utc, utc_iso

DEFAULT_POOL = "default_pool"  # the pool of a task that names none (Airflow's name)
MAX_POOLS = 1_000
MAX_POOL_SLOTS = 1_000_000  # a pool's slots, and one task's pool_slots
MAX_POOL_DESCRIPTION_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    slots: int
    description: str
    updated_at: datetime

    def to_list(self) -> list[Any]:
        return [self.name, self.slots, self.description, utc_iso(self.updated_at)]

    @classmethod
    def from_list(cls, item: list[Any]) -> Pool:
        name, slots, description, updated_at = item
        when = parse_utc(updated_at)
        assert when is not None
        return cls(str(name), int(slots), str(description), when)


def fp_pool(pool: Pool) -> str:
    return "pool:" + dg.canonical(pool.to_list())


def pool_of(task: TaskSpec) -> str:
    """The pool a task's attempts take slots of ("" in its spec: ``default_pool``)."""
    return getattr(task, "pool", "") or DEFAULT_POOL


def slots_of(task: TaskSpec) -> int:
    return max(1, int(getattr(task, "pool_slots", 1) or 1))


class PoolTable:
    __slots__ = ("_held", "_pools", "_sum", "_used")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._pools: dict[str, Pool] = {}
        self._sum = digest_sum
        self._used: dict[str, int] = {}  # pool -> slots its RUNNING attempts hold
        self._held: dict[TaskKey, tuple[str, int]] = {}  # RUNNING task -> (pool, slots)

    def __len__(self) -> int:
        return len(self._pools)

    def __bool__(self) -> bool:
        return bool(self._pools)

    def get(self, name: str) -> Pool | None:
        return self._pools.get(name)

    def pools(self) -> list[Pool]:
        """Every pool, by name."""
        return [self._pools[name] for name in sorted(self._pools)]

    def put(self, pool: Pool) -> None:
        old = self._pools.get(pool.name)
        if old is not None:
            self._sum.remove(fp_pool(old))
        self._pools[pool.name] = pool
        self._sum.add(fp_pool(pool))

    def delete(self, name: str) -> None:
        self._sum.remove(fp_pool(self._pools.pop(name)))

    # -- slots in use (derived from the running set) ------------------------------------------

    def occupy(self, key: TaskKey, task: TaskSpec) -> None:
        """``key`` became RUNNING: its attempt holds its task's slots of its task's pool."""
        pool, slots = pool_of(task), slots_of(task)
        self.release(key)
        self._held[key] = (pool, slots)
        self._used[pool] = self._used.get(pool, 0) + slots

    def release(self, key: TaskKey) -> None:
        """``key`` left RUNNING: the slots its attempt held are free."""
        held = self._held.pop(key, None)
        if held is None:
            return
        pool, slots = held
        left = self._used.get(pool, 0) - slots
        if left > 0:
            self._used[pool] = left
        else:
            self._used.pop(pool, None)

    def used(self, name: str) -> int:
        return self._used.get(name, 0)

    def room(self, name: str) -> int | None:
        """Slots the pool grants now; None: unlimited (``default_pool`` while unset)."""
        pool = self._pools.get(name)
        if pool is None:
            return None if name == DEFAULT_POOL else 0
        return max(0, pool.slots - self.used(name))

    def has_room(self, name: str) -> bool:
        room = self.room(name)
        return room is None or room > 0

    # -- digest and snapshot ---------------------------------------------------------------

    def fingerprints(self) -> Iterator[str]:
        return (fp_pool(pool) for pool in self._pools.values())

    def to_list(self) -> list[list[Any]]:
        return [pool.to_list() for pool in self.pools()]

    def load(self, data: Any) -> None:
        """Restore (None: a snapshot from before pools); the caller recomputes the digest."""
        self._pools = {p.name: p for p in (Pool.from_list(item) for item in data or ())}
