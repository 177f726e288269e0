"""Plain-dict forms of the replicated state: outbox rows and snapshot records.

Outbox rows follow the ``OutboxKind`` layouts in ``core.model``. A task instance's row is the
*attempt* its current state belongs to (:func:`attempt_number`): RUNNING, SUCCESS and FAILED
belong to attempt ``try_number``; every other state (NONE, QUEUED, UP_FOR_RETRY,
UPSTREAM_FAILED, SKIPPED) describes the attempt still to come, ``try_number + 1``. So each
attempt keeps its own history row and the row with the highest try_number is the TI's
current state.

Snapshots are JSON-able dicts (see ``SCHEMA_VERSION``); results kept for idempotency are
stored with a small tagged encoding (:func:`encode_value`) that restores them exactly.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ParamSpec, TypeVar

from raftsched.core.commands import LeaseRef, QueueDecision, RunDecision
from raftsched.core.model import (
    DagRecord,
    DagRun,
    ImportErrorRecord,
    Lease,
    RunState,
    RunType,
    TaskInstance,
    TaskKey,
    TaskSpec,
    TaskState,
    TriggerRule,
    omitted_at_default,
    parse_utc,
    utc_iso,
)
from raftsched.core.results import Item, LeaseGrant, Result
from raftsched.core.rows import DagRow, RunRow, TaskRow
from raftsched.core.snapshot_share import SnapshotShare

# 1: the first release. 2: halted, clock, evicted_slots and fences (a release that knows only
# 1 refuses a 2: it would drop the fences and lease a fenced task again). Every release reads
# the versions before its own.
SCHEMA_VERSION = 2
# A snapshot holding variables or connections says 3, so a release that knows only 2 refuses it
# rather than dropping them; one without any still says 2 (and digests as before: the digest
# folds in SCHEMA_VERSION, which stays 2).
SECRETS_SCHEMA_VERSION = 3


def readable_with_secrets(version: int, data: Any) -> bool:
    """Whether a snapshot past SCHEMA_VERSION is one this release reads all the same: version
    SECRETS_SCHEMA_VERSION with its ``secrets`` table."""
    return version == SECRETS_SCHEMA_VERSION and "secrets" in data


ATTEMPT_STATES = frozenset({TaskState.RUNNING, TaskState.SUCCESS, TaskState.FAILED})


# -- outbox rows (typed in core/rows.py, shared with the materializer) ---------------------


def attempt_number(ti: TaskInstance, state: TaskState | None = None) -> int:
    return ti.try_number if _is_attempt(ti, state or ti.state) else ti.try_number + 1


def _is_attempt(ti: TaskInstance, state: TaskState) -> bool:
    """Whether the row of ``state`` is an attempt's: an attempt state, or SKIPPED by the
    attempt itself (a bash skip exit code; only a started attempt has a start_date there)."""
    return (
        state in ATTEMPT_STATES
        or state is TaskState.DEFERRED  # the attempt that deferred: it ran on a worker
        or (state is TaskState.SKIPPED and ti.start_date is not None)
    )


def ti_row(ti: TaskInstance, state: TaskState | None = None, message: str | None = None) -> dict:
    """The TASK_INSTANCE row of ``ti`` (``state``/``message`` override: closing an attempt)."""
    state = state or ti.state
    key = ti.key
    if _is_attempt(ti, state):
        held = {
            "worker_id": ti.worker_id,
            "lease_token": ti.lease_token,
            "queued_at": ti.queued_at,
            "start_date": ti.start_date,
            "end_date": ti.end_date,
            "exit_code": ti.exit_code,
            "message": ti.message if message is None else message,
        }
    else:  # no attempt: only the times that say where it waits or how it ended
        ended = state in (TaskState.UPSTREAM_FAILED, TaskState.SKIPPED)
        held = {
            "worker_id": None,
            "lease_token": None,
            "queued_at": ti.queued_at if state is TaskState.QUEUED else None,
            "start_date": None,
            "end_date": ti.end_date if ended else None,
            "exit_code": None,
            "message": "" if message is None else message,
        }
    try_number = attempt_number(ti, state)
    if state is TaskState.SUCCESS and ti.result_json is not None:
        held["result_json"] = ti.result_json  # the attempt's XCom (core/xcom.py)
    return TaskRow(key.dag_id, key.run_id, key.task_id, try_number, str(state), **held).to_wire()


def run_row(run: DagRun) -> dict:
    return RunRow(
        dag_id=run.dag_id,
        run_id=run.run_id,
        logical_date=run.logical_date,
        data_interval_start=run.data_interval_start,
        data_interval_end=run.data_interval_end,
        run_type=str(run.run_type),
        state=str(run.state),
        conf=dict(run.conf),
        created_at=run.created_at,
        start_date=run.start_date,
        end_date=run.end_date,
    ).to_wire()


def dag_row(record: DagRecord) -> dict:
    return DagRow(
        dag_id=record.spec.dag_id,
        fileloc=record.spec.fileloc,
        spec=record.spec.to_dict(),
        spec_hash=record.spec.spec_hash,
        paused=record.paused,
        active=record.active,
        updated_at=record.updated_at,
    ).to_wire()


def import_error_dict(error: ImportErrorRecord) -> dict:
    return {"fileloc": error.fileloc, "message": error.message, "traceback": error.traceback}


# -- snapshot records ---------------------------------------------------------------------


def dag_record_to_dict(record: DagRecord, iso: Callable[[Any], str | None] = utc_iso) -> dict:
    """``iso``: ``SnapshotShare.iso`` (one text per instant), in a snapshot."""
    return {
        "dag_id": record.spec.dag_id,
        "spec_hash": record.spec.spec_hash,
        "paused": record.paused,
        "active": record.active,
        "updated_at": iso(record.updated_at),
        "last_logical_date": iso(record.last_logical_date),
        **_policy_fields(record),
    }


def _policy_fields(record: DagRecord) -> dict:
    """Fields added later, only when set: a record without them snapshots as before."""
    out: dict = {}
    if record.scheduled_runs:
        out["scheduled_runs"] = record.scheduled_runs
    if record.skipped:
        out["skipped"] = [s.to_dict() for s in record.skipped]
    if record.pause_note:
        out["pause_note"] = record.pause_note
    if record.gaps:
        out["gaps"] = [g.to_dict() for g in record.gaps]
    if record.terms:
        out["terms"] = [t.to_dict() for t in record.terms]
    return out


def run_to_dict(run: DagRun, spec_hash: str, row_seq: int, tis: list[dict]) -> dict:
    data = run_row(run)
    data.update(spec_hash=spec_hash, row_seq=row_seq, tis=tis)
    if run.asset_events_json:  # only then: runs without snapshot as before (§21)
        data["asset_events_json"] = run.asset_events_json
    return data


def ti_to_dict(ti: TaskInstance, share: SnapshotShare | None = None) -> dict:
    """``share``: the snapshot's (equal strings and timestamps one object)."""
    iso = utc_iso if share is None else share.iso
    lease = ti.lease
    data = {
        "task_id": ti.key.task_id,
        "state": str(ti.state),
        "try_number": ti.try_number,
        "max_tries": ti.max_tries,
        "lease": None
        if lease is None
        else {
            "try_number": lease.try_number,
            "worker_id": lease.worker_id,
            "token": lease.token,
            "expires_at": iso(lease.expires_at),
        },
        "next_retry_at": iso(ti.next_retry_at),
        "queued_at": iso(ti.queued_at),
        "start_date": iso(ti.start_date),
        "end_date": iso(ti.end_date),
        "exit_code": ti.exit_code,
        "message": ti.message,
        "log_chunks": ti.log_chunks,
        "worker_id": ti.worker_id,
        "lease_token": ti.lease_token,
        **({} if ti.result_json is None else {"result_json": ti.result_json}),
        **({} if ti.resume_json is None else {"resume_json": ti.resume_json}),
        **({} if ti.map_count is None else {"map_count": ti.map_count}),
    }
    if share is None:
        return data
    if lease is not None:
        data["lease"] = share.row(data["lease"])
    return share.row(data)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def without_gc(restore: Callable[_P, _R]) -> Callable[_P, _R]:
    """``restore`` with Python's cyclic GC paused: a restore (or a snapshot, or unpickling
    one) allocates millions of objects that all stay alive, and each collection on the way
    would walk every one of them for nothing (about half of a restore's time at 100,000 DAGs,
    a third of a snapshot's). Neither makes cycles that need the collector; it runs again (if
    it was on) as soon as the call returns."""

    @functools.wraps(restore)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return restore(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused


def outbox_share(outbox: Mapping[str, Any]) -> int | None:
    """The outbox's digest share a snapshot carries (``Outbox.load``); None if it has none
    (written by an older release, or built by ``store rebuild``): then it is recomputed."""
    share = outbox.get("digest_share")
    return int(share, 16) if isinstance(share, str) else None


# -- tagged encoding of remembered results ------------------------------------------------

_DATACLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Result,
        LeaseGrant,
        Lease,
        TaskKey,
        TaskSpec,
        LeaseRef,
        QueueDecision,
        RunDecision,
        ImportErrorRecord,
    )
}
_ENUMS: dict[str, type[Enum]] = {
    cls.__name__: cls for cls in (TaskState, RunState, RunType, TriggerRule)
}


def encode_value(value: Any) -> Any:
    """JSON-able form of a result value; :func:`decode_value` restores it exactly."""
    if isinstance(value, Enum):
        return {"$e": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return {"$dt": utc_iso(value)}
    if isinstance(value, Item):
        return {"$item": [encode_value(v) for v in value]}
    if isinstance(value, tuple):
        return {"$t": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {"$m": {str(k): encode_value(v) for k, v in value.items()}}
    if is_dataclass(value) and type(value).__name__ in _DATACLASSES:
        omitted = omitted_at_default(value)  # fields added later, at their default: as before
        return {
            "$c": type(value).__name__,
            "f": {
                f.name: encode_value(getattr(value, f.name))
                for f in fields(value)
                if f.name not in omitted
            },
        }
    raise TypeError(f"cannot encode {type(value).__name__} in a snapshot")


def decode_value(data: Any) -> Any:
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "$e" in data:
        return _ENUMS[data["$e"]](data["v"])
    if "$dt" in data:
        return parse_utc(data["$dt"])
    if "$item" in data:
        return Item(*(decode_value(v) for v in data["$item"]))
    if "$t" in data:
        return tuple(decode_value(v) for v in data["$t"])
    if "$m" in data:
        return {k: decode_value(v) for k, v in data["$m"].items()}
    if "$c" in data:
        cls = _DATACLASSES[data["$c"]]
        return cls(**{k: decode_value(v) for k, v in data["f"].items()})
    raise ValueError(f"unknown encoded value {data!r}")
