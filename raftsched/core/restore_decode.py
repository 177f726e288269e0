"""Decoding a snapshot's records into state objects, for one restore.

A snapshot of 100,000 DAGs made from a few templates repeats the same few values: the same
handful of timestamps, schedules and task lists in every spec and record. A
:class:`RestoreDecoder` builds each such value once and hands the same (immutable) object to
every record that holds an equal one, so a restore parses each distinct timestamp once,
builds each distinct ``Schedule`` and task tuple once, and the restored state holds them
once. The objects built are equal, field by field and type by type, to what
``DagSpec.from_dict`` builds (a spec dict with a key that is not a DagSpec field is read by it
instead), and the records are read exactly as ``core.snapshot`` writes them.

One decoder per restore: its memos key some values by the ``id`` of the snapshot's dicts,
which the caller keeps alive (the snapshot) for as long as the decoder is used.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any

from raftsched.core.model import (
    DagRecord,
    DagRun,
    DagSpec,
    Lease,
    OutboxEntry,
    OutboxKind,
    RunState,
    RunType,
    Schedule,
    ScheduleKind,
    TaskInstance,
    TaskKey,
    TaskSpec,
    TaskState,
    _callbacks,
    _task_from_dict,
    parse_utc,
)
from raftsched.core.results import Item
from raftsched.core.run_terms import TermStart
from raftsched.core.skip_causes import Gap
from raftsched.core.slot_policy import SkippedSlots
from raftsched.core.snapshot import _DATACLASSES, _ENUMS, decode_value

# The keys of a spec dict :meth:`RestoreDecoder.spec` reads: DagSpec's fields, taken from the
# class so that none can be left out of this list (a dict with any other key is read by
# DagSpec.from_dict). A new field must also be decoded in ``spec``: the unit test
# test_the_decoder_reads_every_dagspec_field fails until it is.
_SPEC_KEYS = frozenset(f.name for f in fields(DagSpec))
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _members(enum: type[Enum]) -> dict[Any, Any]:
    """``enum(value)`` as a dict lookup (an Enum call is ~1 us; a restore makes 300,000)."""
    return {member.value: member for member in enum}  # type: ignore[var-annotated]


_TASK_STATES = _members(TaskState)
_RUN_STATES = _members(RunState)
_RUN_TYPES = _members(RunType)
_OUTBOX_KINDS = _members(OutboxKind)
_SCHEDULE_KINDS = _members(ScheduleKind)


def _member(table: dict[Any, Any], enum: type[Enum], value: Any) -> Any:
    found = table.get(value) if type(value) is str else None
    return found if found is not None else enum(value)  # anything else: as enum() answers


class RestoreDecoder:
    """Reads one snapshot's records; equal immutable values come back as one object."""

    __slots__ = ("_dates", "_schedules", "_task_lists", "_tasks")

    def __init__(self) -> None:
        self._dates: dict[str, datetime | None] = {}
        self._schedules: dict[tuple[Any, ...], Schedule] = {}
        self._tasks: dict[Any, TaskSpec] = {}  # DagSpec.from_dict's ``tasks_seen``
        self._task_lists: dict[tuple[int, ...], tuple[TaskSpec, ...]] = {}

    def date(self, text: str | None) -> datetime | None:
        """``parse_utc(text)``, once per distinct text."""
        if text is None:
            return None
        found = self._dates.get(text)
        if found is None:
            found = self._dates[text] = parse_utc(text)
        return found

    def spec(self, data: dict[str, Any]) -> DagSpec:
        """``DagSpec.from_dict(data)``, sharing schedules, dates and task tuples."""
        if not _SPEC_KEYS.issuperset(data):
            return DagSpec.from_dict(data, self._tasks)
        get = data.get
        deadline = get("deadline_seconds")
        window, max_runs = get("catchup_window_seconds"), get("max_runs")
        jitter, timeout = get("jitter_seconds"), get("dagrun_timeout_seconds")
        callbacks = get("callbacks")
        return DagSpec(
            dag_id=data["dag_id"],
            fileloc=data["fileloc"],
            schedule=self._schedule(data["schedule"]),
            timezone=get("timezone", "UTC"),
            start_date=self.date(get("start_date")),
            end_date=self.date(get("end_date")),
            catchup=bool(get("catchup", False)),
            max_active_runs=int(get("max_active_runs", 16)),
            max_active_tasks=int(get("max_active_tasks", 16)),
            tags=tuple(get("tags", ())),
            description=get("description", ""),
            tasks=self._task_tuple(get("tasks", ())),
            spec_hash=get("spec_hash", ""),
            params_json=get("params_json", ""),
            callbacks=_callbacks(callbacks) if callbacks else (),
            deadline_seconds=None if deadline is None else float(deadline),
            overlap=get("overlap", ""),
            catchup_window_seconds=None if window is None else float(window),
            max_runs=None if max_runs is None else int(max_runs),
            jitter_seconds=None if jitter is None else float(jitter),
            pause_on_failure=bool(get("pause_on_failure", False)),
            dst_repeated=get("dst_repeated", ""),
            dst_skipped=get("dst_skipped", ""),
            dagrun_timeout_seconds=None if timeout is None else float(timeout),
            asset_condition=get("asset_condition", ""),
            asset_watchers=get("asset_watchers", ""),
        )

    def _schedule(self, data: dict[str, Any]) -> Schedule:
        kind, cron, every = data["kind"], data.get("cron"), data.get("interval_seconds")
        display = data.get("display", "")
        # types in the key: 60 and 60.0 (or True and 1) are equal keys, not equal values here
        key = (kind, type(cron), cron, type(every), every, type(display), display)
        found = self._schedules.get(key)
        if found is None:
            found = self._schedules[key] = Schedule(
                kind=_member(_SCHEDULE_KINDS, ScheduleKind, kind),
                cron=cron,
                interval_seconds=every,
                display=display,
            )
        return found

    def _task_tuple(self, tasks: list[dict[str, Any]]) -> tuple[TaskSpec, ...]:
        # by the ids of the task dicts: a snapshot shares equal task dicts (spec_dicts)
        key = tuple(map(id, tasks))
        found = self._task_lists.get(key)
        if found is None:
            found = self._task_lists[key] = tuple(_task_from_dict(t, self._tasks) for t in tasks)
        return found

    def record(self, data: dict[str, Any], specs: dict[str, DagSpec]) -> DagRecord:
        return DagRecord(
            spec=specs[data["spec_hash"]],
            paused=bool(data["paused"]),
            active=bool(data["active"]),
            updated_at=self.date(data["updated_at"]),
            last_logical_date=self.date(data["last_logical_date"]),
            scheduled_runs=int(data.get("scheduled_runs", 0)),
            skipped=tuple(SkippedSlots.from_dict(s) for s in data.get("skipped", ())),
            pause_note=str(data.get("pause_note", "")),
            gaps=tuple(Gap.from_dict(g) for g in data.get("gaps", ())),
            terms=tuple(TermStart.from_dict(t) for t in data.get("terms", ())),
        )

    def run(self, data: dict[str, Any]) -> DagRun:
        date = self.date
        return DagRun(
            dag_id=data["dag_id"],
            run_id=data["run_id"],
            logical_date=_required(date(data["logical_date"])),
            data_interval_start=_required(date(data["data_interval_start"])),
            data_interval_end=_required(date(data["data_interval_end"])),
            run_type=_member(_RUN_TYPES, RunType, data["run_type"]),
            state=_member(_RUN_STATES, RunState, data["state"]),
            conf=dict(data["conf"]),
            created_at=date(data["created_at"]),
            start_date=date(data["start_date"]),
            end_date=date(data["end_date"]),
            asset_events_json=data.get("asset_events_json", ""),
        )

    def task_instance(self, data: dict[str, Any], dag_id: str, run_id: str) -> TaskInstance:
        key = TaskKey(dag_id, run_id, data["task_id"])
        lease = data["lease"]
        date = self.date
        return TaskInstance(
            key=key,
            state=_member(_TASK_STATES, TaskState, data["state"]),
            try_number=int(data["try_number"]),
            max_tries=int(data["max_tries"]),
            lease=None
            if lease is None
            else Lease(
                key=key,
                try_number=int(lease["try_number"]),
                worker_id=lease["worker_id"],
                token=int(lease["token"]),
                expires_at=_required(date(lease["expires_at"])),
            ),
            next_retry_at=date(data["next_retry_at"]),
            queued_at=date(data["queued_at"]),
            start_date=date(data["start_date"]),
            end_date=date(data["end_date"]),
            exit_code=data["exit_code"],
            message=data["message"],
            log_chunks=int(data["log_chunks"]),
            worker_id=data["worker_id"],
            lease_token=data["lease_token"],
            result_json=data.get("result_json"),
            resume_json=data.get("resume_json"),
            map_count=None if data.get("map_count") is None else int(data["map_count"]),
        )


def outbox_entries(items: list[list[Any]]) -> list[OutboxEntry]:
    """The snapshot's outbox entries, their data verbatim (``Outbox.load``)."""
    kinds = _OUTBOX_KINDS
    return [OutboxEntry(int(seq), _member(kinds, OutboxKind, kind), e) for seq, kind, e in items]


def result(data: Any) -> Any:
    """``snapshot.decode_value(data)`` (a remembered result), with fewer calls per value."""
    kind = type(data)
    if kind is list:
        return [v if type(v) in _SCALARS else result(v) for v in data]
    if kind is not dict or len(data) > 2:
        return decode_value(data)
    if "$c" in data and "$e" not in data and "$dt" not in data:
        fields = data["f"]
        if "$item" not in data and "$t" not in data and "$m" not in data:
            return _DATACLASSES[data["$c"]](
                **{k: v if type(v) in _SCALARS else result(v) for k, v in fields.items()}
            )
    elif "$t" in data and len(data) == 1:
        return tuple([v if type(v) in _SCALARS else result(v) for v in data["$t"]])
    elif "$item" in data and len(data) == 1:
        return Item(*[v if type(v) in _SCALARS else result(v) for v in data["$item"]])
    elif "$e" in data and len(data) == 2 and "v" in data:
        return _ENUMS[data["$e"]](data["v"])
    return decode_value(data)


def _required(value: datetime | None) -> datetime:
    assert value is not None
    return value
