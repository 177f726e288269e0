"""The trigger table: the triggers deferred task instances wait on, and their leases to
triggerer processes (docs/architecture.md §17).

Owns one :class:`Trigger` per DEFERRED task instance, by its task key, in creation order.
Guarantees: a trigger is held exactly while its task instance is DEFERRED (``transitions.
set_state`` drops it when the task leaves that state, whatever moved it); at most
``MAX_TRIGGERS`` are held, at most ``MAX_TRIGGERS_PER_DAG`` of one DAG; a trigger is leased
to one triggerer at a time under a fencing token (the granting command's log index), and a
lease that expires makes it leasable again with a newer token, so a stale triggerer's
firing is refused. Each trigger's fingerprint (:func:`fp_trigger`) is in the shared digest
sum exactly while held; the table joins the snapshot only when it holds a trigger. Raises
nothing on any input the handlers pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.model import TaskKey, parse_utc, utc_iso

MAX_TRIGGERS = 100_000  # deferred task instances of the whole cluster
MAX_TRIGGERS_PER_DAG = 10_000  # one DAG's; past it a deferral fails its attempt


@dataclass(frozen=True, slots=True)
class Trigger:
    """What a deferred attempt waits on. ``kind`` names a built-in trigger ("time", "file",
    ...) or ``user:<module>.<Class>`` in the DAG folder; ``args_json`` its arguments (a JSON
    object); ``method_name`` and ``kwargs_json`` what the resumed attempt calls."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int  # the attempt that deferred
    kind: str
    args_json: str
    method_name: str
    kwargs_json: str
    fileloc: str  # the DAG file (a user-defined trigger's class lives beside it)
    created_at: datetime
    timeout_at: datetime | None = None
    triggerer_id: str = ""  # "" while not leased
    token: int = 0
    expires_at: datetime | None = None

    @property
    def key(self) -> TaskKey:
        return TaskKey(self.dag_id, self.run_id, self.task_id)

    def to_list(self) -> list[Any]:
        data = asdict(self)
        for name in ("created_at", "timeout_at", "expires_at"):
            data[name] = utc_iso(data[name])
        return [data[f] for f in _FIELDS]

    @classmethod
    def from_list(cls, items: list[Any]) -> Trigger:
        data = dict(zip(_FIELDS, items, strict=True))
        for name in ("created_at", "timeout_at", "expires_at"):
            data[name] = parse_utc(data[name])
        return cls(**data)


_FIELDS = tuple(Trigger.__dataclass_fields__)


def fp_trigger(trigger: Trigger) -> str:
    return "trigger:" + dg.canonical(trigger)


class TriggerTable:
    __slots__ = ("_by_dag", "_sum", "_triggers")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._sum = digest_sum
        self._triggers: dict[TaskKey, Trigger] = {}
        self._by_dag: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._triggers)

    def __len__(self) -> int:
        return len(self._triggers)

    def get(self, key: TaskKey) -> Trigger | None:
        return self._triggers.get(key)

    def triggers(self) -> Iterator[Trigger]:
        return iter(self._triggers.values())

    def room_for(self, dag_id: str) -> bool:
        return (
            len(self._triggers) < MAX_TRIGGERS
            and self._by_dag.get(dag_id, 0) < MAX_TRIGGERS_PER_DAG
        )

    def add(self, trigger: Trigger) -> None:
        """Hold a new trigger (the caller checked :meth:`room_for`; its task has none)."""
        self._triggers[trigger.key] = trigger
        self._by_dag[trigger.dag_id] = self._by_dag.get(trigger.dag_id, 0) + 1
        self._sum.add(fp_trigger(trigger))

    def drop(self, key: TaskKey) -> Trigger | None:
        trigger = self._triggers.pop(key, None)
        if trigger is not None:
            self._sum.remove(fp_trigger(trigger))
            left = self._by_dag[trigger.dag_id] - 1
            if left:
                self._by_dag[trigger.dag_id] = left
            else:
                del self._by_dag[trigger.dag_id]
        return trigger

    def _put(self, old: Trigger, new: Trigger) -> Trigger:
        self._sum.remove(fp_trigger(old))
        self._triggers[new.key] = new
        self._sum.add(fp_trigger(new))
        return new

    # -- leases -----------------------------------------------------------------------------

    def leasable(self, now: datetime) -> Iterator[Trigger]:
        """Triggers no live lease holds (never leased, or its triggerer fell silent)."""
        for trigger in self._triggers.values():
            if trigger.expires_at is None or trigger.expires_at <= now:
                yield trigger

    def lease(
        self, trigger: Trigger, triggerer_id: str, token: int, expires_at: datetime
    ) -> Trigger:
        return self._put(
            trigger,
            replace(trigger, triggerer_id=triggerer_id, token=token, expires_at=expires_at),
        )

    def renew(self, trigger: Trigger, expires_at: datetime) -> Trigger:
        return self._put(trigger, replace(trigger, expires_at=expires_at))

    def timed_out(self, now: datetime, limit: int) -> list[TaskKey]:
        """Keys of triggers past their timeout (at most ``limit``), for the leader."""
        out = []
        for trigger in self._triggers.values():
            if trigger.timeout_at is not None and trigger.timeout_at <= now:
                out.append(trigger.key)
                if len(out) >= limit:
                    break
        return out

    def running_count(self, now: datetime) -> int:
        """Triggers held by a live lease (``raftsched_triggers_running``)."""
        return sum(
            1 for t in self._triggers.values() if t.expires_at is not None and t.expires_at > now
        )

    # -- digest and snapshot ------------------------------------------------------------------

    def fingerprints(self) -> Iterator[str]:
        return (fp_trigger(trigger) for trigger in self._triggers.values())

    def to_dict(self) -> dict[str, Any]:
        return {"triggers": [trigger.to_list() for trigger in self._triggers.values()]}

    def load(self, data: Any) -> None:
        """Restore (a snapshot's ``triggers``, or None); the caller recomputes the digest."""
        for items in (data or {}).get("triggers", ()):
            trigger = Trigger.from_list(items)
            self._triggers[trigger.key] = trigger
            self._by_dag[trigger.dag_id] = self._by_dag.get(trigger.dag_id, 0) + 1
