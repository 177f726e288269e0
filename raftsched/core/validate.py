"""The core's own check of every command, before apply changes anything.

The core trusts no caller: a command reached the log through an API, a leader of another
release or a pickle nobody checked. :func:`check_command` walks every field of a command
(types, ranges, sizes, characters: the bounds of ``core.limits``) and raises
:class:`~raftsched.errors.LimitExceeded` naming the first field that breaks one. Apply calls
it first; a refused command changes nothing (see ``core.state``). What passes here can be
fingerprinted, snapshotted and written to any supported database.

DAG specs are checked by ``core.validate_specs`` (:func:`check_spec`, re-exported here).

Pure: no I/O beyond reading the time zone database (deterministic for one tzdata release).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftsched.core import asset_condition as ac
from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core import secret_policy, xcom
from raftsched.core import versions as vs
from raftsched.core.asset_commands import CHECKS as ASSET_CHECKS
from raftsched.core.handlers_callbacks import CHECKS as CALLBACK_CHECKS
from raftsched.core.handlers_pools import CHECKS as POOL_CHECKS
from raftsched.core.handlers_triggers import CHECKS as TRIGGER_CHECKS
from raftsched.core.limits import (
    check_conf,
    check_datetime,
    check_float,
    check_id,
    check_int,
    check_text,
)
from raftsched.core.model import (
    ImportErrorRecord,
    RunType,
    TaskKey,
    TaskState,
)
from raftsched.core.run_ending import ENDINGS
from raftsched.core.run_terms import check_leader
from raftsched.core.run_timeout import CHECKS as TIMEOUT_CHECKS
from raftsched.core.secret_reads import CHECKS as SECRET_READ_CHECKS
from raftsched.core.slot_policy import SKIP_REASONS
from raftsched.core.validate_specs import HOST_ZONES, TASK_KINDS, check_spec
from raftsched.core.validate_specs import bool_field as _bool
from raftsched.core.validate_specs import enum_field as _enum
from raftsched.core.validate_specs import tuple_field as _tuple
from raftsched.errors import LimitExceeded

__all__ = [
    "HOST_ZONES",
    "LOG_STREAMS",
    "TASK_KINDS",
    "check_command",
    "check_run_decision",
    "check_spec",
]

LOG_STREAMS = frozenset({"stdout", "stderr"})


def check_command(command: object) -> None:
    """Raise LimitExceeded unless ``command`` is a well-formed command within every bound."""
    if not isinstance(command, c.Command):
        raise LimitExceeded("command", f"is a {type(command).__name__}, not a command")
    check_id("request_id", command.request_id)
    check_datetime("now", command.now)
    checker = _CHECKS.get(type(command))
    if checker is None:
        raise LimitExceeded("command", f"{type(command).__name__} is not a known command")
    checker(command)


# -- helpers --------------------------------------------------------------------------------


def _key(field: str, key: object) -> None:
    if not isinstance(key, TaskKey):
        raise LimitExceeded(field, f"must be a TaskKey, got {type(key).__name__}")
    check_id(f"{field}.dag_id", key.dag_id)
    check_id(f"{field}.run_id", key.run_id)
    check_id(f"{field}.task_id", key.task_id)


def _token(field: str, token: object) -> None:
    check_int(field, token, 0, lim.MAX_TOKEN)


def _lease_ref(field: str, ref: object) -> None:
    if not isinstance(ref, c.LeaseRef):
        raise LimitExceeded(field, f"must be a LeaseRef, got {type(ref).__name__}")
    _key(f"{field}.key", ref.key)
    _token(f"{field}.token", ref.token)


def _lease_refs(field: str, refs: object) -> None:
    for i, ref in enumerate(_tuple(field, refs, lim.MAX_ITEMS_PER_COMMAND)):
        _lease_ref(f"{field}[{i}]", ref)


def _ttl(field: str, value: object) -> None:
    check_float(field, value, lim.MIN_LEASE_TTL_SECONDS, lim.MAX_LEASE_TTL_SECONDS)


def _chunks(field: str, chunks: object) -> None:
    for i, chunk in enumerate(_tuple(field, chunks, lim.MAX_LOG_CHUNKS_PER_CALL)):
        if not isinstance(chunk, c.LogChunk):
            raise LimitExceeded(f"{field}[{i}]", f"must be a LogChunk, not {type(chunk).__name__}")
        if not isinstance(chunk.stream, str) or chunk.stream not in LOG_STREAMS:
            raise LimitExceeded(f"{field}[{i}].stream", "must be 'stdout' or 'stderr'")
        _output_text(f"{field}[{i}].text", chunk.text)


def _output_text(field: str, value: object) -> None:
    """A task's output or outcome text: sanitized and cut by apply (``core.limits.clean_text``),
    never refused for its characters (entries of older releases carry NUL, and the bytes a
    task prints are not ours to refuse). Only its type and a generous size are checked."""
    if not isinstance(value, str):
        raise LimitExceeded(field, f"must be a string, got {type(value).__name__}")
    if len(value) > lim.MAX_OUTPUT_TEXT_CHARS:
        raise LimitExceeded(
            field,
            f"is {len(value)} characters long; the limit is {lim.MAX_OUTPUT_TEXT_CHARS}",
            limit=lim.MAX_OUTPUT_TEXT_CHARS,
            size=len(value),
        )


# -- one checker per command ------------------------------------------------------------------


def _register(cmd: c.RegisterDags) -> None:
    """Each spec is checked by the handler: one bad DAG is refused alone, not its file's
    neighbours (the parser checks the same bounds first, so this is a second line)."""
    _tuple("specs", cmd.specs, lim.MAX_DAGS_PER_COMMAND)
    _bool("paused_at_creation", cmd.paused_at_creation)


def _remove(cmd: c.RemoveDags) -> None:
    for i, dag_id in enumerate(_tuple("dag_ids", cmd.dag_ids, lim.MAX_DAGS_PER_COMMAND)):
        check_id(f"dag_ids[{i}]", dag_id)


def _import_errors(cmd: c.SetImportErrors) -> None:
    for i, error in enumerate(_tuple("errors", cmd.errors, lim.MAX_IMPORT_ERRORS)):
        if not isinstance(error, ImportErrorRecord):
            raise LimitExceeded(f"errors[{i}]", "must be an ImportErrorRecord")
        check_text(f"errors[{i}].fileloc", error.fileloc, lim.MAX_FILELOC_CHARS)
        _output_text(f"errors[{i}].message", error.message)
        _output_text(f"errors[{i}].traceback", error.traceback)


def _actor(cmd: Any) -> None:
    """Who asked (core/audit.py): shown in terminals and pages, so printable only."""
    check_text("actor", cmd.actor, lim.MAX_ACTOR_CHARS)
    if not lim.ACTOR_PATTERN.fullmatch(cmd.actor):
        raise LimitExceeded("actor", "must hold no control characters")


def _set_paused(cmd: c.SetPaused) -> None:
    _actor(cmd)
    check_id("dag_id", cmd.dag_id)
    _bool("paused", cmd.paused)
    check_text("note", cmd.note, lim.MAX_PAUSE_NOTE_CHARS)


def _create_runs(cmd: c.CreateRuns) -> None:
    """Each decision is checked by the handler (:func:`check_run_decision`): one bad slot is
    refused alone, never the 49 good ones batched with it."""
    _actor(cmd)
    _tuple("runs", cmd.runs, lim.MAX_RUNS_PER_COMMAND)
    check_leader(getattr(cmd, "leader", ()))


def check_run_decision(d: object, field: str = "run") -> None:
    if not isinstance(d, c.RunDecision):
        raise LimitExceeded(field, f"must be a RunDecision, got {type(d).__name__}")
    check_id(f"{field}.dag_id", d.dag_id)
    check_datetime(f"{field}.logical_date", d.logical_date)
    for name in ("data_interval_start", "data_interval_end"):
        check_datetime(f"{field}.{name}", getattr(d, name), earliest=lim.MIN_INTERVAL_DATE)
    _enum(f"{field}.run_type", d.run_type, RunType)
    if d.conf:  # {} is the common case: nothing to walk
        check_conf(d.conf, f"{field}.conf")
    elif not isinstance(d.conf, dict):
        raise LimitExceeded(f"{field}.conf", "must be a JSON object")
    if d.run_id != "":
        check_id(f"{field}.run_id", d.run_id)
    if d.skip_reason != "" and d.skip_reason not in SKIP_REASONS:
        raise LimitExceeded(f"{field}.skip_reason", f"unknown reason {str(d.skip_reason)[:40]!r}")
    check_int(f"{field}.skipped_slots", d.skipped_slots, 0, lim.MAX_RUNS_LIMIT)
    if d.end_active != "" and d.end_active not in ENDINGS:
        raise LimitExceeded(f"{field}.end_active", "must be 'cancel' or 'terminate'")


def _queue(cmd: c.QueueTasks) -> None:
    for i, q in enumerate(_tuple("items", cmd.items, lim.MAX_ITEMS_PER_COMMAND)):
        if not isinstance(q, c.QueueDecision):
            raise LimitExceeded(f"items[{i}]", "must be a QueueDecision")
        _key(f"items[{i}].key", q.key)
        _enum(f"items[{i}].expected_state", q.expected_state, TaskState)
        check_int(f"items[{i}].try_number", q.try_number, 0, lim.MAX_TRY_NUMBER)
    for i, pair in enumerate(_tuple("unreachable", cmd.unreachable, lim.MAX_ITEMS_PER_COMMAND)):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise LimitExceeded(f"unreachable[{i}]", "must be a (key, state) pair")
        _key(f"unreachable[{i}].key", pair[0])
        _enum(f"unreachable[{i}].state", pair[1], TaskState)


def _lease(cmd: c.LeaseTasks) -> None:
    check_id("worker_id", cmd.worker_id)
    check_int("max_tasks", cmd.max_tasks, 0, lim.MAX_LEASES_PER_CALL)
    _ttl("lease_ttl_seconds", cmd.lease_ttl_seconds)
    queues = getattr(cmd, "queues", ())  # absent in entries of older releases
    for i, queue in enumerate(_tuple("queues", queues, lim.MAX_QUEUES_PER_WORKER)):
        check_id(f"queues[{i}]", queue)


def _heartbeat(cmd: c.HeartbeatLeases) -> None:
    check_id("worker_id", cmd.worker_id)
    _lease_refs("leases", cmd.leases)
    _ttl("lease_ttl_seconds", cmd.lease_ttl_seconds)


def _holder(cmd: c.CompleteAttempt | c.AppendLogs) -> None:
    worker_id = getattr(cmd, "worker_id", "")  # absent in entries of older releases
    if worker_id != "":
        check_id("worker_id", worker_id)


def _complete(cmd: c.CompleteAttempt) -> None:
    _holder(cmd)
    _key("key", cmd.key)
    _token("token", cmd.token)
    _bool("success", cmd.success)
    if cmd.exit_code is not None:
        check_int("exit_code", cmd.exit_code, lim.MIN_EXIT_CODE, lim.MAX_EXIT_CODE)
    _output_text("message", cmd.message)
    _chunks("chunks", cmd.chunks)
    xcom.check_result_json("result_json", getattr(cmd, "result_json", ""))
    xcom.check_follow("follow", getattr(cmd, "follow", None))
    _bool("skipped", getattr(cmd, "skipped", False))
    ac.check_outlet_extras("outlet_extras", getattr(cmd, "outlet_extras", ()))


def _release(cmd: c.ReleaseLeases) -> None:
    check_id("worker_id", cmd.worker_id)
    _lease_refs("leases", cmd.leases)


def _expire(cmd: c.ExpireLeases) -> None:
    _lease_refs("leases", cmd.leases)


def _append_logs(cmd: c.AppendLogs) -> None:
    _holder(cmd)
    _key("key", cmd.key)
    _token("token", cmd.token)
    _chunks("chunks", cmd.chunks)


def _task_ids(cmd: c.ClearTasks | c.MarkTasks) -> None:
    _actor(cmd)
    check_id("dag_id", cmd.dag_id)
    check_id("run_id", cmd.run_id)
    for i, task_id in enumerate(_tuple("task_ids", cmd.task_ids, lim.MAX_TASKS_PER_DAG)):
        check_id(f"task_ids[{i}]", task_id)


def _clear(cmd: c.ClearTasks) -> None:
    _task_ids(cmd)
    _bool("include_downstream", cmd.include_downstream)


def _mark(cmd: c.MarkTasks) -> None:
    _task_ids(cmd)
    _enum("state", cmd.state, TaskState)
    if TaskState(cmd.state) not in (TaskState.SUCCESS, TaskState.FAILED):
        raise LimitExceeded("state", f"must be success or failed, not {cmd.state}")


def _ack(cmd: c.AckMaterialized) -> None:
    check_int("seq", cmd.seq, 0, lim.MAX_TOKEN)
    check_float(
        "finished_run_retention_seconds",
        cmd.finished_run_retention_seconds,
        0.0,
        10 * lim.MAX_DURATION_SECONDS,
    )


def _secret_ref(cmd: c.SetSecret | c.DeleteSecret) -> None:
    _actor(cmd)
    if not isinstance(cmd.kind, str) or cmd.kind not in c.SECRET_KINDS:
        raise LimitExceeded("kind", f"must be one of {', '.join(c.SECRET_KINDS)}")
    check_text("key", cmd.key, lim.MAX_SECRET_KEY_CHARS, empty=False)
    if not lim.SECRET_KEY_PATTERN.fullmatch(cmd.key):
        raise LimitExceeded(
            "key", "must be a letter or _ followed by letters, digits or _ (e.g. MY_VAR)"
        )


def _ciphertext(field: str, value: object) -> None:
    check_text(field, value, lim.MAX_SECRET_CIPHERTEXT_CHARS, empty=False)
    if not lim.FERNET_TOKEN_PATTERN.fullmatch(str(value)):
        raise LimitExceeded(field, "is not a Fernet token (values are stored encrypted only)")


def _set_secret(cmd: c.SetSecret) -> None:
    _secret_ref(cmd)
    _ciphertext("ciphertext", cmd.ciphertext)
    check_text("description", cmd.description, lim.MAX_SECRET_DESCRIPTION_CHARS)
    if cmd.expected is not None:
        _ciphertext("expected", cmd.expected)
    secret_policy.check_dags("dags", cmd.dags)


def _batch(cmd: c.Batch) -> None:
    """Sub-commands are checked one by one as they are applied; no batch inside a batch."""
    for i, sub in enumerate(_tuple("commands", cmd.commands, lim.MAX_ITEMS_PER_COMMAND)):
        if not isinstance(sub, c.Command) or isinstance(sub, c.Batch):
            raise LimitExceeded(f"commands[{i}]", "must be a command other than Batch")


def _cluster_version(cmd: c.SetClusterVersion) -> None:
    # At most this release: a state holding a newer cluster version could not restore its
    # own snapshot (ReleaseTooOld). A node stops before applying such an entry anyway
    # (cluster/versions.py too_old_for), so only a hostile or corrupt entry meets this.
    check_int("version", cmd.version, 1, vs.RELEASE)


_CHECKS: dict[type, Callable[[Any], None]] = {
    c.RegisterDags: _register,
    c.RemoveDags: _remove,
    c.SetImportErrors: _import_errors,
    c.SetPaused: _set_paused,
    c.CreateRuns: _create_runs,
    c.QueueTasks: _queue,
    c.LeaseTasks: _lease,
    c.HeartbeatLeases: _heartbeat,
    c.CompleteAttempt: _complete,
    c.ReleaseLeases: _release,
    c.ExpireLeases: _expire,
    c.AppendLogs: _append_logs,
    c.ClearTasks: _clear,
    c.MarkTasks: _mark,
    c.AckMaterialized: _ack,
    c.SetSecret: _set_secret,
    c.DeleteSecret: _secret_ref,
    c.Batch: _batch,
    **CALLBACK_CHECKS,
    **TRIGGER_CHECKS,
    **POOL_CHECKS,
    **TIMEOUT_CHECKS,
    **SECRET_READ_CHECKS,
    **ASSET_CHECKS,
    c.SetClusterVersion: _cluster_version,
}
