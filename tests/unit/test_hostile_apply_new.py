"""Hostile commands, every command class and every field: apply stays total and atomic.

``test_hostile_apply.py`` covers the first release's commands; this file covers every class
in ``raftsched/core/commands.py`` (a guard test fails when a new one is not generated here),
with hostile values in each field, the fields added since (queues, return values, branches,
skips, callbacks, deadlines, params, the cluster version) included. The checks are the same:
apply never raises nor halts, a command refused as a whole changes nothing but the request-id
memory, the incremental digest equals a recomputed one, and a replica restored from a
snapshot taken part-way and fed the log's tail ends with the same digest.
"""

from __future__ import annotations

import inspect
import json
import pickle
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched.core import asset_commands as acm
from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import limits as lim
from raftsched.core import pool_commands as pc
from raftsched.core import results as r
from raftsched.core import secret_reads as sr
from raftsched.core import versions as vs
from raftsched.core import xcom
from raftsched.core.callback_table import RUNNING
from raftsched.core.model import ImportErrorRecord, RunType, TaskKey, TaskState
from raftsched.core.results import Item
from raftsched.core.run_timeout import TimeoutRuns
from raftsched.core.state import SchedulerState
from raftsched.errors import LimitExceeded
from tests.unit.test_hostile_apply import (
    CONFS,
    DATES,
    HOSTILE_TEXT,
    IDS,
    NUMBERS,
    WHOLE_REFUSALS,
)
from tests.unit.test_state_harness import T0, Sim, at, dag, run_id, task

Draw = st.DrawFn
TASK_IDS = st.one_of(st.sampled_from(["a", "b", "c", "ghost"]), IDS)
# JSON texts a return value, a DAG's params or a notifier's settings might be
JSON_TEXTS = st.sampled_from(
    [
        "",
        "1",
        '{"a": [1, 2]}',
        "not json",
        "a\x00b",
        '"a\\u0000b"',  # NUL escaped inside valid JSON
        '"\\ud800"',  # a lone surrogate escaped inside valid JSON
        "\ud800",
        "[" * 40 + "]" * 40,
        "[" * 100_000,
        '{"a":' * 5_000 + "1" + "}" * 5_000,
        '"' + "y" * 70_000 + '"',
        "NaN",
        "1e400",
        "9" * 5_000,  # past Python's int-from-text digit limit
        '{"a": 1, "a": 2}',
        "[]",
        "null",
    ]
)
NOT_TEXT = st.sampled_from([None, 7, b"bytes", ["x"], ("x",), {"x": 1}])
RESULT_JSON = st.one_of(JSON_TEXTS, NOT_TEXT)
FOLLOW = st.one_of(
    st.sampled_from([None, (), ("b",), ("c",), ("b", "c"), ("b", "b"), ["b"], "b", (1,), (None,)]),
    st.tuples(TASK_IDS),
    st.just(tuple(f"t{i}" for i in range(10_001))),
)
BOOLS = st.sampled_from([True, False, 1, 0, None, "yes"])
QUEUES = st.one_of(
    st.sampled_from(
        [
            (),
            ("default",),
            ("q2", "default"),
            ("default", "default"),
            ("",),
            ("\x00",),
            ("x" * 300,),
            ("a\nb",),
            (None,),
            ["default"],
            "default",
            tuple(f"q{i}" for i in range(65)),
        ]
    ),
    st.tuples(IDS),
)
RUN_IDS = st.just(run_id())
VERSIONS = st.sampled_from([0, -1, 1, 2, 3, 1000, 1001, 2**70, "2", 2.0, True, None])
EXIT_CODES = st.one_of(st.sampled_from([None, 0, 1, 255, 256, True, "1", 2.0]), NUMBERS)
EVENTS = st.sampled_from(["failure", "success", "retry", "deadline", "bogus", "", ["failure"]])
REFS = st.sampled_from(
    ["notify", "raftsched:webhook", "raftsched:evil", "", "a\x00b", "x" * 2_000, None, 3]
)
CALLBACKS = st.one_of(
    st.lists(st.tuples(EVENTS, REFS, st.one_of(JSON_TEXTS, NOT_TEXT)), max_size=3).map(tuple),
    st.sampled_from(
        [
            (("failure", "notify", "{}"),) * 9,
            (("failure", "notify"),),
            ("failure", "notify", "{}"),
            [("failure", "notify", "{}")],
            (["failure", "notify", "{}"],),
            (("deadline", "notify", '{"conn_id": "c"}'),),
            (("success", "raftsched:webhook", '{"url": "http://x"}'),),
            None,
        ]
    ),
)
PARAMS = st.one_of(
    JSON_TEXTS,
    NOT_TEXT,
    st.sampled_from(
        [
            '{"p": {"default": 1, "type": "integer"}}',
            '{"p": {"type": {"a": 1}}}',  # an unhashable type
            '{"p": {"type": [["string"]]}}',
            '{"p": {"type": ["string", "null"]}}',
            '{"p": {"type": "bogus"}}',
            '{"p": {"bogus": 1}}',
            '{"p": 1}',
            '{"": {}}',
            '{"p": {"default": NaN}}',
            '{"p": {"default": 1e999}}',
            '{"a\\u0000": {}}',
            "{" + ", ".join(f'"p{i}": {{}}' for i in range(257)) + "}",
        ]
    ),
)
DEADLINES = st.one_of(
    st.sampled_from([None, 60, 60.0, 1, 0, -1, 0.5, True, "60", 366 * 86_400, 366 * 86_400 + 1]),
    NUMBERS,
)


def _key(draw: Draw) -> TaskKey:
    runs = st.sampled_from([run_id(), run_id(T0 + timedelta(days=1), "manual"), "ghost"])
    return TaskKey(draw(st.one_of(st.just("d"), IDS)), draw(st.one_of(runs, IDS)), draw(TASK_IDS))


def _token(draw: Draw, sim: Sim) -> Any:
    live = [lease.token for lease in sim.state.leases()]
    known = st.sampled_from(live) if live else st.just(1)
    return draw(st.one_of(known, st.integers(-5, sim.index + 5), NUMBERS))


_STREAMS = st.sampled_from(["stdout", "stderr", "tty", None])
_CHUNK_LISTS = st.lists(
    st.builds(c.LogChunk, _STREAMS, st.one_of(HOSTILE_TEXT, NOT_TEXT)), max_size=3
)
CHUNKS = st.one_of(_CHUNK_LISTS.map(tuple), _CHUNK_LISTS, st.sampled_from(["text", (None,)]))


def _chunks(draw: Draw) -> Any:
    return draw(CHUNKS)


TASK_VALID = {
    "queue": st.sampled_from(["default", "q2", "zz"]),
    "skip_on_exit_code": st.sampled_from([None, 1, 99, 255]),
    "callbacks": st.sampled_from(
        [
            (),
            (("failure", "notify", "{}"),),
            (("success", "raftsched:webhook", '{"url": "http://x"}'), ("retry", "notify", "")),
        ]
    ),
    "pool": st.sampled_from(["", "p", "default_pool", "nope"]),
    "pool_slots": st.sampled_from([1, 2, 5]),
}
TASK_KINDS = st.sampled_from(["bash"] * 6 + ["empty"] * 3 + ["EMPTY", None, 3])
TASK_HOSTILE = {
    "queue": st.one_of(IDS, NOT_TEXT),
    "skip_on_exit_code": EXIT_CODES,
    "callbacks": CALLBACKS,
    "pool": st.one_of(IDS, NOT_TEXT),
    "pool_slots": st.sampled_from([0, -1, 1_000_001, 2**70, True, "2", 2.0, None]),
}
DAG_VALID = {
    "params_json": st.sampled_from(["", '{"p": {"default": 1, "type": ["integer", "null"]}}']),
    "callbacks": st.sampled_from(
        [(), (("deadline", "notify", "{}"),), (("failure", "notify", ""), ("success", "n", ""))]
    ),
    "deadline_seconds": st.sampled_from([None, 1, 60, 60.0, 366 * 86_400]),
    "max_active_runs": st.just(4),
}
DAG_HOSTILE = {
    "params_json": PARAMS,
    "callbacks": CALLBACKS,
    "deadline_seconds": DEADLINES,
    "max_active_runs": NUMBERS,
}


def _hostile_spec(draw: Draw) -> Any:
    def one_task(task_id: str, *upstream: str) -> Any:
        spec = task(task_id, *upstream, **_fields(draw, TASK_VALID, TASK_HOSTILE))
        return replace(spec, kind=draw(TASK_KINDS))  # empty: finished by apply itself

    tasks = [one_task(draw(TASK_IDS))]
    if draw(st.booleans()):  # a second task after the first: branches and trigger rules
        tasks.append(one_task("c", tasks[0].task_id))
    dag_id = draw(st.one_of(st.sampled_from(["d", "d", "e"]), IDS))
    return dag(dag_id, *tasks, **_fields(draw, DAG_VALID, DAG_HOSTILE))


def _job_id(draw: Draw, sim: Sim) -> Any:
    known = [job.job_id for job in sim.state.callbacks.jobs()]
    pick = st.sampled_from(known) if known else st.just("d/x/a/1/failure/0")
    return draw(st.one_of(pick, pick, IDS, st.just("x" * 2_000), NOT_TEXT))


# One builder per command class: (sim, request id) -> a hostile command of that class.
Builder = Callable[[Draw, Sim, str, Any], c.Command]


def _lease_refs(draw: Draw, sim: Sim) -> Any:
    refs = tuple(c.LeaseRef(_key(draw), _token(draw, sim)) for _ in range(draw(st.integers(0, 2))))
    return draw(st.sampled_from([refs, refs, list(refs), (None,), ("ref",)]))


BUILDERS: dict[type, Builder] = {
    c.RegisterDags: lambda draw, sim, rid, now: c.RegisterDags(
        request_id=rid,
        now=now,
        specs=tuple(_hostile_spec(draw) for _ in range(draw(st.integers(1, 2)))),
        paused_at_creation=draw(BOOLS),
    ),
    c.RemoveDags: lambda draw, sim, rid, now: c.RemoveDags(
        request_id=rid,
        now=now,
        dag_ids=draw(st.one_of(st.tuples(IDS), st.sampled_from([("e",), ["e"], "e", (None,)]))),
    ),
    c.SetImportErrors: lambda draw, sim, rid, now: c.SetImportErrors(
        request_id=rid,
        now=now,
        errors=draw(
            st.one_of(
                st.tuples(st.builds(ImportErrorRecord, HOSTILE_TEXT, HOSTILE_TEXT, HOSTILE_TEXT)),
                st.sampled_from([(), ("not a record",), [ImportErrorRecord("/f.py", "x")]]),
                st.tuples(st.builds(ImportErrorRecord, NOT_TEXT, NOT_TEXT)),
            )
        ),
    ),
    c.SetPaused: lambda draw, sim, rid, now: c.SetPaused(
        request_id=rid, now=now, dag_id=draw(IDS), paused=draw(BOOLS)
    ),
    c.CreateRuns: lambda draw, sim, rid, now: c.CreateRuns(
        request_id=rid,
        now=now,
        runs=(
            c.RunDecision(
                draw(IDS),
                draw(DATES),
                draw(DATES),
                draw(DATES),
                run_type=draw(st.sampled_from([RunType.MANUAL, RunType.SCHEDULED, "bogus"])),
                conf=draw(CONFS),
                run_id=draw(st.one_of(st.just(""), IDS)),
            ),
        ),
    ),
    c.QueueTasks: lambda draw, sim, rid, now: _queue_tasks(draw, sim, rid, now),
    c.LeaseTasks: lambda draw, sim, rid, now: c.LeaseTasks(
        request_id=rid,
        now=now,
        **_fields(
            draw,
            {
                "worker_id": st.just("w1"),
                "max_tasks": st.integers(0, 5),
                "lease_ttl_seconds": st.just(30.0),
                "queues": st.sampled_from([(), ("q2",), ("default", "q2"), ("zz",)]),
            },
            {
                "worker_id": IDS,
                "max_tasks": NUMBERS,
                "lease_ttl_seconds": NUMBERS,
                "queues": QUEUES,
            },
        ),
    ),
    c.HeartbeatLeases: lambda draw, sim, rid, now: c.HeartbeatLeases(
        request_id=rid,
        now=now,
        worker_id=draw(st.one_of(st.just("w1"), IDS)),
        leases=_lease_refs(draw, sim),
        lease_ttl_seconds=draw(st.one_of(st.just(30.0), NUMBERS)),
    ),
    c.CompleteAttempt: lambda draw, sim, rid, now: _complete(draw, sim, rid, now),
    c.ReleaseLeases: lambda draw, sim, rid, now: c.ReleaseLeases(
        request_id=rid,
        now=now,
        worker_id=draw(st.one_of(st.just("w1"), IDS)),
        leases=_lease_refs(draw, sim),
    ),
    c.ExpireLeases: lambda draw, sim, rid, now: c.ExpireLeases(
        request_id=rid, now=now, leases=_lease_refs(draw, sim)
    ),
    c.AppendLogs: lambda draw, sim, rid, now: c.AppendLogs(
        request_id=rid,
        now=now,
        key=_key(draw),
        token=_token(draw, sim),
        chunks=_chunks(draw),
        worker_id=draw(st.one_of(st.just("w1"), IDS)),
    ),
    c.ClearTasks: lambda draw, sim, rid, now: c.ClearTasks(
        request_id=rid,
        now=now,
        dag_id=draw(st.one_of(st.just("d"), IDS)),
        run_id=draw(st.sampled_from([run_id(), "x" * 10_000, "ghost"])),
        task_ids=draw(st.one_of(st.tuples(TASK_IDS), st.sampled_from([["a"], "a", ()]))),
        include_downstream=draw(BOOLS),
    ),
    c.MarkTasks: lambda draw, sim, rid, now: c.MarkTasks(
        request_id=rid,
        now=now,
        dag_id=draw(st.one_of(st.just("d"), IDS)),
        run_id=run_id(),
        task_ids=draw(st.one_of(st.tuples(TASK_IDS), st.just(("a", "b", "c")))),
        state=draw(st.sampled_from([TaskState.SUCCESS, TaskState.SKIPPED, "bogus", None])),
    ),
    c.SetSecret: lambda draw, sim, rid, now: c.SetSecret(
        request_id=rid,
        now=now,
        **_fields(
            draw,
            {
                "kind": st.sampled_from(["variable", "connection"]),
                "key": st.just("K"),
                "ciphertext": st.just("gAAAAAabc="),
                "description": st.just(""),
                "expected": st.sampled_from([None, "gAAAAAabc=", "gAAAAAxyz="]),
                "dags": st.sampled_from([(), ("d",), ("d", "e")]),  # core/secret_policy.py
            },
            {
                "kind": st.sampled_from(["bogus", None, ""]),
                "key": st.one_of(st.sampled_from(["1bad", "a-b"]), IDS),
                "ciphertext": st.sampled_from(["clear text", "gAAAAA" + "a" * 90_000, ""]),
                "description": st.one_of(HOSTILE_TEXT, NOT_TEXT),
                "expected": st.one_of(HOSTILE_TEXT, NOT_TEXT),
                "dags": st.one_of(
                    st.sampled_from([("e", "d"), ("d", "d"), ["d"], "d", (None,), ("",)]),
                    st.just(tuple(f"d{i}" for i in range(60))),
                    st.tuples(IDS),
                    NOT_TEXT,
                ),
            },
        ),
    ),
    c.DeleteSecret: lambda draw, sim, rid, now: c.DeleteSecret(
        request_id=rid,
        now=now,
        kind=draw(st.sampled_from(["variable", "connection", "bogus"])),
        key=draw(st.one_of(st.just("K"), IDS)),
    ),
    c.AckMaterialized: lambda draw, sim, rid, now: c.AckMaterialized(
        request_id=rid,
        now=now,
        seq=draw(st.one_of(st.integers(-3, sim.state.outbox_last_seq + 3), NUMBERS)),
        finished_run_retention_seconds=draw(st.one_of(st.just(1.0), NUMBERS)),
    ),
    c.Batch: lambda draw, sim, rid, now: _batch(draw, sim, rid, now),
    c.SetClusterVersion: lambda draw, sim, rid, now: c.SetClusterVersion(
        request_id=rid, now=now, version=draw(VERSIONS)
    ),
    c.LeaseCallbacks: lambda draw, sim, rid, now: c.LeaseCallbacks(
        request_id=rid,
        now=now,
        **_fields(
            draw,
            {
                "worker_id": st.just("w1"),
                "max_jobs": st.integers(1, 5),
                "lease_ttl_seconds": st.just(60.0),
            },
            {"worker_id": IDS, "max_jobs": NUMBERS, "lease_ttl_seconds": NUMBERS},
        ),
    ),
    c.CompleteCallback: lambda draw, sim, rid, now: _complete_callback(draw, sim, rid, now),
    c.MissDeadlines: lambda draw, sim, rid, now: c.MissDeadlines(
        request_id=rid,
        now=now,
        runs=draw(
            st.one_of(
                st.tuples(
                    st.tuples(st.one_of(st.just("d"), IDS), st.one_of(st.just(run_id()), IDS))
                ),
                st.sampled_from([(("d",),), [("d", run_id())], ((None, None),), "d"]),
            )
        ),
    ),
}


def _fields(draw: Draw, valid: dict[str, Any], hostile: dict[str, Any]) -> dict[str, Any]:
    """Field values: every one hostile, or (more often) valid but one, so that the hostile
    value gets past the checks of the others and reaches the handler when it is accepted."""
    if draw(st.integers(0, 3)) == 0:
        return {name: draw(hostile[name]) for name in valid}
    odd = draw(st.sampled_from(sorted(valid)))
    return {name: draw(hostile[name] if name == odd else valid[name]) for name in valid}


COMPLETE_VALID = {
    "success": st.booleans(),
    "exit_code": st.sampled_from([None, 0, 1, 99]),
    "message": st.sampled_from(["", "done"]),
    "chunks": st.just(()),
    "result_json": st.sampled_from(["", "1", '{"a": [1, "x"]}', "null", '"' + "v" * 60_000 + '"']),
    "follow": st.sampled_from([None, (), ("b",), ("c",), ("b", "c"), ("ghost",), ("a",)]),
    "skipped": st.booleans(),
    "outlet_extras": st.sampled_from(
        [(), (("s3://bucket/a", '{"rows": 3}'),), (("s3://bucket/a", "{}"), ("s3://z", "{}"))]
    ),
}
COMPLETE_HOSTILE = {
    "success": BOOLS,
    "exit_code": EXIT_CODES,
    "message": st.one_of(HOSTILE_TEXT, NOT_TEXT),
    "chunks": CHUNKS,
    "result_json": RESULT_JSON,
    "follow": FOLLOW,
    "skipped": BOOLS,
    "outlet_extras": st.one_of(
        NOT_TEXT,
        st.sampled_from(
            [
                [("s3://bucket/a", "{}")],
                (("s3://bucket/a", "[1]"),),
                (("s3://bucket/a", "{"),),
                (("s3://bucket/a", '{"a": "' + "v" * 70_000 + '"}'),),
                (("s3://bucket/a", "[" * 100 + "]" * 100),),
                (("s3://bucket/b", "{}"), ("s3://bucket/a", "{}")),
                (("s3://bucket/a", "{}"), ("s3://bucket/a", "{}")),
                (("s3://bucket/a", 7),),
                (("s3://bucket/a",),),
                ((None, "{}"),),
                (("a\nb", "{}"),),
                (("s3://bucket/a", "\ud800"),),
                tuple((f"s3://b/{i}", "{}") for i in range(150)),
            ]
        ),
    ),
}


def _complete(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    live = sim.state.leases()
    if live and draw(st.integers(0, 3)):  # a real lease: the values reach the handler
        lease = draw(st.sampled_from(live))
        key, token, worker = lease.key, lease.token, lease.worker_id
    else:
        key, token, worker = _key(draw), _token(draw, sim), draw(st.one_of(st.just("w1"), IDS))
    values = _fields(draw, COMPLETE_VALID, COMPLETE_HOSTILE)
    return c.CompleteAttempt(
        request_id=rid, now=now, key=key, token=token, worker_id=worker, **values
    )


def _complete_callback(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    running = [job for job in sim.state.callbacks.jobs() if job.state == RUNNING]
    if running and draw(st.integers(0, 3)):
        job = draw(st.sampled_from(running))
        job_id, token, worker = job.job_id, job.token, job.worker_id
    else:
        job_id, token = _job_id(draw, sim), _token(draw, sim)
        worker = draw(st.one_of(st.just("w1"), IDS))
    values = _fields(
        draw,
        {k: COMPLETE_VALID[k] for k in ("success", "message", "chunks")},
        {k: COMPLETE_HOSTILE[k] for k in ("success", "message", "chunks")},
    )
    return c.CompleteCallback(
        request_id=rid, now=now, worker_id=worker, job_id=job_id, token=token, **values
    )


def _queue_tasks(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    tis = [ti for rec in sim.state.run_table.records("d") for ti in rec.tis.values()]
    real = st.sampled_from([ti.key for ti in tis]) if tis else st.just(TaskKey("d", "r", "a"))
    key = draw(st.one_of(real, real, st.builds(lambda: _key(draw))))
    decision = c.QueueDecision(
        key,
        draw(st.sampled_from([TaskState.NONE, TaskState.UP_FOR_RETRY, TaskState.SUCCESS, "none"])),
        draw(st.one_of(st.integers(0, 3), NUMBERS)),
    )
    state = draw(st.sampled_from([TaskState.SKIPPED, TaskState.UPSTREAM_FAILED, *TaskState, "x"]))
    return c.QueueTasks(
        request_id=rid,
        now=now,
        items=draw(st.sampled_from([(decision,), (), ("decision",), [decision]])),
        unreachable=draw(st.sampled_from([(), ((key, state),), ((key,),), (("k", state),)])),
    )


def _batch(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    kinds = sorted((k for k in BUILDERS if k is not c.Batch), key=lambda k: k.__name__)
    inner = tuple(
        BUILDERS[draw(st.sampled_from(kinds))](draw, sim, f"{rid}-{i}", now)
        for i in range(draw(st.integers(0, 2)))
    )
    nested = c.Batch(request_id=rid + "-b", now=now, commands=inner)
    return c.Batch(
        request_id=rid, now=now, commands=draw(st.sampled_from([inner, (nested,), list(inner)]))
    )


@st.composite
def any_hostile_command(draw: Draw, sim: Sim, rid: str) -> c.Command:
    # a hostile "now" in one command of five: the others reach their fields' checks
    fine = st.builds(at, st.integers(0, 400))
    now = draw(st.one_of(fine, fine, fine, fine, DATES))
    kind = draw(st.sampled_from(sorted(BUILDERS, key=lambda k: k.__name__)))
    return BUILDERS[kind](draw, sim, rid, now)


# -- on-demand reads of variables and connections (core/secret_reads.py) ----------------------


def _read_secrets(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    live = sim.state.leases()
    lease = draw(st.sampled_from(live)) if live else None
    return sr.ReadSecrets(
        request_id=rid,
        now=now,
        **_fields(
            draw,
            {
                "key": st.just(lease.key) if lease else st.builds(lambda: _key(draw)),
                "token": st.just(lease.token) if lease else st.just(1),
                "worker_id": st.just(lease.worker_id) if lease else st.just("w1"),
                "kind": st.sampled_from(["variable", "connection"]),
                "names": st.sampled_from([("K",), ("K", "L"), ("NOT_SET",)]),
            },
            {
                "key": st.sampled_from([None, "d/r/a", ("d", "r", "a")]),
                "token": st.builds(lambda: _token(draw, sim)),
                "worker_id": st.one_of(st.sampled_from(["w2", "", "w\n"]), NOT_TEXT),
                "kind": st.sampled_from(["bogus", None, "", "token"]),
                "names": st.one_of(
                    st.sampled_from([(), ["K"], "K", ("1bad",), ("K" * 200,), (None,)]),
                    st.just(tuple(f"N{i}" for i in range(20))),
                    NOT_TEXT,
                ),
            },
        ),
    )


BUILDERS[sr.ReadSecrets] = _read_secrets


# -- pools (core/pool_commands.py, core/handlers_pools.py) ------------------------------------

POOL_NAMES = st.sampled_from(["p", "default_pool", "etl"])
POOL_NAMES_HOSTILE = st.one_of(st.sampled_from(["", "a\nb", "x" * 300, "a\x00b"]), NOT_TEXT)
POOL_SLOTS_HOSTILE = st.sampled_from([-1, 1_000_001, 2**70, True, "2", 2.0, None])
ACTORS = st.sampled_from(["", "ops"])
ACTORS_HOSTILE = st.one_of(st.sampled_from(["a\nb", "x" * 300]), NOT_TEXT)


def _set_pool(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    fields = _fields(
        draw,
        {
            "name": POOL_NAMES,
            "slots": st.integers(0, 5),
            "description": st.sampled_from(["", "loads"]),
            "actor": ACTORS,
        },
        {
            "name": POOL_NAMES_HOSTILE,
            "slots": POOL_SLOTS_HOSTILE,
            "description": st.one_of(st.sampled_from(["x" * 1_001, "a\x00b"]), NOT_TEXT),
            "actor": ACTORS_HOSTILE,
        },
    )
    return pc.SetPool(request_id=rid, now=now, **fields)


def _delete_pool(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    fields = _fields(
        draw,
        {"name": POOL_NAMES, "actor": ACTORS},
        {"name": POOL_NAMES_HOSTILE, "actor": ACTORS_HOSTILE},
    )
    return pc.DeletePool(request_id=rid, now=now, **fields)


BUILDERS[pc.SetPool] = _set_pool
BUILDERS[pc.DeletePool] = _delete_pool


# -- asset events from outside (core/asset_commands.py, core/handlers_assets.py) --------------
ASSET_URIS = st.sampled_from(["s3://bucket/a", "file:///data/b.csv", "s3://bucket/a"])
ASSET_URIS_HOSTILE = st.one_of(
    st.sampled_from(["", "a\nb", "s3://" + "x" * 5_000, "no scheme", "s3://a\x00b"]), NOT_TEXT
)
ASSET_EXTRAS_HOSTILE = st.one_of(
    st.sampled_from(["", "[1]", "{", '{"a": "' + "v" * 70_000 + '"}', "[" * 100 + "]" * 100]),
    NOT_TEXT,
)


def _asset_event(draw: Draw) -> Any:
    fields = _fields(
        draw,
        {
            "uri": ASSET_URIS,
            "extra_json": st.sampled_from(["{}", '{"rows": 3}']),
            "key": st.sampled_from(["", "k1", "k1"]),
        },
        {
            "uri": ASSET_URIS_HOSTILE,
            "extra_json": ASSET_EXTRAS_HOSTILE,
            "key": st.one_of(st.sampled_from(["a\nb", "k" * 1_000]), NOT_TEXT),
        },
    )
    return acm.AssetEventIn(**fields)


def _emit_asset_events(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    events = draw(
        st.one_of(
            st.lists(st.builds(lambda: None), max_size=0).map(tuple),
            st.lists(st.just(None), min_size=1, max_size=3).map(
                lambda slots: tuple(_asset_event(draw) for _ in slots)
            ),
            st.sampled_from([None, "s3://bucket/a", [], ({"uri": "s3://bucket/a"},)]),
        )
    )
    actor = draw(st.one_of(ACTORS, ACTORS_HOSTILE))
    return acm.EmitAssetEvents(request_id=rid, now=now, events=events, actor=actor)


BUILDERS[acm.EmitAssetEvents] = _emit_asset_events


# -- dagrun_timeout (core/run_timeout.py) ------------------------------------------------------
BUILDERS[TimeoutRuns] = lambda draw, sim, rid, now: TimeoutRuns(
    request_id=rid,
    now=now,
    runs=draw(
        st.one_of(
            st.tuples(st.tuples(st.one_of(st.just("d"), IDS), st.one_of(st.just(run_id()), IDS))),
            st.sampled_from([(("d",),), [("d", run_id())], ((None, None),), "d"]),
        )
    ),
)


# -- deferred tasks and triggers (core/handlers_triggers.py) ----------------------------------

TRIGGER_KINDS = st.sampled_from(["file", "time", "user:mod.Cls", "", "a b", "x" * 400, None, 3])
TRIGGER_JSON = st.one_of(JSON_TEXTS, NOT_TEXT, st.just('{"path": "/tmp/x"}'))
TIMEOUTS = st.sampled_from([None, 0.0, 0.5, 1.0, 30.0, float("nan"), float("inf"), -1.0, "5"])
DEFER_VALID = {
    "kind": st.sampled_from(["file", "time"]),
    "args_json": st.sampled_from(["{}", '{"path": "/tmp/x"}']),
    "method_name": st.sampled_from(["execute_complete", "done"]),
    "kwargs_json": st.sampled_from(["{}", '{"n": 1}']),
    "timeout_seconds": st.sampled_from([None, 1.0, 30.0]),
    "chunks": st.just(()),
}
DEFER_HOSTILE = {
    "kind": TRIGGER_KINDS,
    "args_json": TRIGGER_JSON,
    "method_name": st.one_of(REFS, st.just("a.b")),
    "kwargs_json": TRIGGER_JSON,
    "timeout_seconds": TIMEOUTS,
    "chunks": CHUNKS,
}


def _trigger_ref(draw: Draw, sim: Sim) -> Any:
    held = list(sim.state.triggers.triggers())
    if held and draw(st.integers(0, 3)):
        trigger = draw(st.sampled_from(held))
        return c.TriggerRef(trigger.key, draw(st.sampled_from([trigger.token, trigger.token + 1])))
    return draw(
        st.one_of(
            st.builds(lambda: c.TriggerRef(_key(draw), _token(draw, sim))),
            st.sampled_from([None, ("d", "r", "a"), c.TriggerRef(None, 1)]),  # type: ignore[arg-type]
        )
    )


def _defer(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    live = sim.state.leases()
    if live and draw(st.integers(0, 3)):
        lease = draw(st.sampled_from(live))
        key, token, worker = lease.key, lease.token, lease.worker_id
    else:
        key, token, worker = _key(draw), _token(draw, sim), draw(st.one_of(st.just("w1"), IDS))
    values = _fields(draw, DEFER_VALID, DEFER_HOSTILE)
    return c.DeferTask(request_id=rid, now=now, worker_id=worker, key=key, token=token, **values)


def _fire(draw: Draw, sim: Sim, rid: str, now: Any) -> c.Command:
    firing = c.TriggerFiring(
        _trigger_ref(draw, sim),
        draw(st.one_of(JSON_TEXTS, NOT_TEXT)),
        draw(st.one_of(st.just(""), st.just("Traceback\nValueError: x"), HOSTILE_TEXT, NOT_TEXT)),
    )
    who = draw(st.one_of(st.just("t1"), IDS))
    firings = draw(st.sampled_from([(firing,), (firing, firing), [firing], (None,)]))
    return c.FireTriggers(request_id=rid, now=now, triggerer_id=who, firings=firings)


BUILDERS.update(
    {
        c.DeferTask: _defer,
        c.LeaseTriggers: lambda draw, sim, rid, now: c.LeaseTriggers(
            request_id=rid,
            now=now,
            **_fields(
                draw,
                {
                    "triggerer_id": st.just("t1"),
                    "max_triggers": st.integers(1, 5),
                    "lease_ttl_seconds": st.just(10.0),
                },
                {"triggerer_id": IDS, "max_triggers": NUMBERS, "lease_ttl_seconds": NUMBERS},
            ),
        ),
        c.HeartbeatTriggers: lambda draw, sim, rid, now: c.HeartbeatTriggers(
            request_id=rid,
            now=now,
            triggerer_id=draw(st.one_of(st.just("t1"), IDS)),
            triggers=draw(st.sampled_from([(), "x"])) or (_trigger_ref(draw, sim),),
            lease_ttl_seconds=draw(st.one_of(st.just(10.0), NUMBERS)),
        ),
        c.FireTriggers: _fire,
        c.TimeoutTriggers: lambda draw, sim, rid, now: c.TimeoutTriggers(
            request_id=rid,
            now=now,
            keys=draw(
                st.one_of(
                    st.builds(lambda: tuple(t.key for t in sim.state.triggers.triggers())),
                    st.builds(lambda: (_key(draw),)),
                    st.sampled_from([(None,), "k", [TaskKey("d", "r", "a")]]),
                )
            ),
        ),
    }
)


def _setup() -> Sim:
    """A DAG using every newer feature: queues, callbacks, a deadline, params, a branch."""
    sim = Sim()
    spec = dag(
        "d",
        task("a", callbacks=(("failure", "notify", "{}"), ("success", "notify", ""))),
        task("b", "a", retries=1, retry_delay_seconds=0.0, queue="q2"),
        task("c", "a", skip_on_exit_code=99, trigger_rule="none_failed_min_one_success"),
        params_json='{"p": {"default": 1, "type": "integer"}}',
        callbacks=(("deadline", "notify", "{}"), ("failure", "raftsched:webhook", "{}")),
        deadline_seconds=60.0,
    )
    assert sim.register(spec).ok
    return sim


def _ordinary(sim: Sim, step: int) -> list[c.Command]:
    """Ordinary work: runs, leases of both queues, outcomes with return values and branch
    choices, callback leases and outcomes, deadline alerts."""
    now = at(step * 40)
    logical = T0 + timedelta(days=step)
    out: list[c.Command] = [
        c.CreateRuns(
            request_id=sim.rid(),
            now=now,
            runs=(c.RunDecision("d", logical, T0, logical, RunType.MANUAL),),
        ),
        c.LeaseTasks(
            request_id=sim.rid(), now=now, worker_id="w1", max_tasks=2, queues=("default", "q2")
        ),
        c.LeaseCallbacks(request_id=sim.rid(), now=now, worker_id="w1", max_jobs=2),
    ]
    for i, lease in enumerate(sim.state.leases()[:2]):
        if step % 3 == 2 and i == 0:  # it waits on a trigger instead
            out.append(
                c.DeferTask(
                    request_id=sim.rid(),
                    now=now,
                    worker_id=lease.worker_id,
                    key=lease.key,
                    token=lease.token,
                    kind="file",
                    timeout_seconds=100.0,
                )
            )
            continue
        out.append(
            c.CompleteAttempt(
                request_id=sim.rid(),
                now=now,
                key=lease.key,
                token=lease.token,
                success=(step + i) % 3 != 0,
                worker_id=lease.worker_id,
                result_json=f'{{"n": {step}}}',
                follow=("c",) if lease.key.task_id == "a" and step % 2 else None,
            )
        )
    for job in [j for j in sim.state.callbacks.jobs() if j.state == RUNNING][:1]:
        out.append(
            c.CompleteCallback(
                request_id=sim.rid(),
                now=now,
                worker_id=job.worker_id,
                job_id=job.job_id,
                token=job.token,
                success=step % 2 == 0,
                chunks=(c.LogChunk("stdout", "called\n"),),
            )
        )
    out.append(c.LeaseTriggers(request_id=sim.rid(), now=now, triggerer_id="t1"))
    for trigger in list(sim.state.triggers.triggers())[:1]:
        firing = c.TriggerFiring(c.TriggerRef(trigger.key, trigger.token), '{"at": 1}')
        out.append(
            c.FireTriggers(request_id=sim.rid(), now=now, triggerer_id="t1", firings=(firing,))
        )
    runs = tuple(rec.key for rec in sim.state.run_table.records("d"))[:3]
    out.append(c.MissDeadlines(request_id=sim.rid(), now=now, runs=runs))
    return out


def _apply_checked(sim: Sim, command: c.Command) -> None:
    """test_hostile_apply's check, but a command answered item by item (MissDeadlines,
    ExpireLeases, ...) is not ok when one item is refused while others applied: atomicity is
    checked only when no item applied."""
    before = sim.state._sum.value
    seqs = (sim.state.outbox_acked_seq, sim.state.outbox_last_seq)
    result = sim.apply(command)  # must not raise
    assert sim.state.halted is None, sim.state.halted
    items = result.value if isinstance(result.value, tuple) else ()
    if result.ok or isinstance(command, c.Batch | c.CreateRuns | c.RegisterDags):
        return
    if any(isinstance(item, Item) and item.ok for item in items):
        return  # some items applied
    after = sim.state._sum.value
    whole = result.reason in WHOLE_REFUSALS and (
        result.reason != r.INVALID or isinstance(result.value, str)
    )
    if whole and not result.duplicate:
        assert after == before, (command, result)
    elif not result.duplicate:  # refused, but remembered: only that memory changed
        remembered = dg.contribution(dg.fp_request(command.request_id, result))
        assert (after - remembered) % (1 << 128) == before, (type(command), result)
    assert (sim.state.outbox_acked_seq, sim.state.outbox_last_seq) == seqs


def _check_replay(sim: Sim, cut: int) -> None:
    assert sim.state.digest() == sim.state.recompute_digest()
    cut = min(cut, len(sim.log))
    replica = Sim()
    for command, index in sim.log[:cut]:
        replica.state.apply(command, log_index=index)
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(replica.state.snapshot())))
    for command, index in sim.log[cut:]:
        restored.apply(command, log_index=index)
    assert restored.digest() == sim.state.digest()
    assert restored.recompute_digest() == sim.state.digest()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), cut=st.integers(0, 60))
def test_every_command_with_hostile_fields_never_breaks_apply(
    data: st.DataObject, cut: int
) -> None:
    sim = _setup()
    for step in range(data.draw(st.integers(1, 8))):
        for command in _ordinary(sim, step):
            # ordinary commands, built from the state, go through the same checks
            _apply_checked(sim, command)
        for _ in range(data.draw(st.integers(1, 4))):
            _apply_checked(sim, data.draw(any_hostile_command(sim, sim.rid())))
    _check_replay(sim, cut)


def test_every_command_class_has_a_hostile_builder() -> None:
    """A command added to core/commands.py, or in a module of its own that the state handles
    (core/secret_reads.py), must be added to BUILDERS (with hostile values in its new fields),
    or it goes into the log untested."""
    from raftsched.core import state as state_module

    commands = {
        obj
        for _, obj in inspect.getmembers(c, inspect.isclass)
        if issubclass(obj, c.Command) and obj is not c.Command and obj.__module__ == c.__name__
    } | set(state_module._HANDLERS)
    missing = sorted(k.__name__ for k in commands - set(BUILDERS))
    assert not missing, f"no hostile builder in {__name__} for: {missing}"
    assert set(BUILDERS) <= commands


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_hostile_spec_field_alone_is_refused_or_taken_and_replays(
    data: st.DataObject,
) -> None:
    """One new spec field at a time on a valid DAG: the hostile value meets the spec checks
    alone (not hidden behind another field's refusal), and a run of the DAG then replays."""
    sim = _setup()
    base = sim.state.catalog.records["d"].spec
    field_values: dict[str, st.SearchStrategy[Any]] = {
        "params_json": PARAMS,
        "callbacks": CALLBACKS,
        "deadline_seconds": DEADLINES,
        "dagrun_timeout_seconds": DEADLINES,
        "asset_watchers": WATCHERS_HOSTILE,
    }
    task_values: dict[str, st.SearchStrategy[Any]] = {
        "queue": st.one_of(IDS, NOT_TEXT, st.just("q2")),
        "skip_on_exit_code": EXIT_CODES,
        "callbacks": CALLBACKS,
        "past_deps": st.one_of(st.sampled_from(["past", "downstream_strict", "nope"]), NOT_TEXT),
        "trigger_dagrun": st.one_of(st.booleans(), NOT_TEXT, NUMBERS),
    }
    if data.draw(st.booleans()):
        name = data.draw(st.sampled_from(sorted(field_values)))
        spec = replace(base, spec_hash="", **{name: data.draw(field_values[name])})
    else:
        name = data.draw(st.sampled_from(sorted(task_values)))
        first = replace(base.tasks[0], **{name: data.draw(task_values[name])})
        spec = replace(base, spec_hash="", tasks=(first, *base.tasks[1:]))
    _apply_checked(sim, c.RegisterDags(request_id=sim.rid(), now=at(1), specs=(spec,)))
    for step in range(1, 4):
        for command in _ordinary(sim, step):
            _apply_checked(sim, command)
    _check_replay(sim, data.draw(st.integers(0, len(sim.log))))


def test_a_cluster_version_past_this_release_is_refused_so_snapshots_still_restore() -> None:
    sim = _setup()
    for version in (0, -1, vs.RELEASE + 1, 2**70, "2", True):
        bump = c.SetClusterVersion(request_id=sim.rid(), now=T0, version=version)
        assert sim.apply(bump).reason == r.INVALID, version
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=vs.RELEASE)).ok
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(sim.state.snapshot())))
    assert restored.cluster_version == vs.RELEASE and restored.digest() == sim.state.digest()


def test_json_texts_are_judged_alike_whatever_the_interpreters_int_digit_limit() -> None:
    """A node started with another PYTHONINTMAXSTRDIGITS must refuse the same texts with the
    same message (a remembered result is in the digest)."""
    huge = "9" * 5_000
    texts = [
        (lambda: lim.parse_conf(f'{{"a": {huge}}}')),
        (lambda: lim.check_params_json("p", f'{{"p": {{"default": {huge}}}}}')),
        (lambda: xcom.check_result_json("r", huge)),
    ]
    default = sys.get_int_max_str_digits()
    messages = []
    for digits in (default, 0):  # 0: no limit at all
        sys.set_int_max_str_digits(digits)
        try:
            for check in texts:
                with pytest.raises(LimitExceeded) as err:
                    check()
                messages.append(str(err.value))
        finally:
            sys.set_int_max_str_digits(default)
    assert messages[: len(texts)] == messages[len(texts) :]


def test_unhashable_values_in_spec_vocabularies_are_refused_by_name() -> None:
    sim = _setup()
    base = sim.state.catalog.records["d"].spec
    bad_type = replace(base, spec_hash="", params_json='{"p": {"type": [["string"]]}}')
    bad_event = replace(base, spec_hash="", callbacks=((["failure"], "notify", "{}"),))
    result = sim.apply(c.RegisterDags(request_id=sim.rid(), now=T0, specs=(bad_type, bad_event)))
    messages = [item.value for item in result.value]
    assert "params_json[p].type" in messages[0] and "unhashable" not in messages[0]
    assert "callbacks[0].event" in messages[1] and "unhashable" not in messages[1]


# -- asset watchers (core/asset_watchers.py): the spec field and their firings -----------------

WATCHED = "file:///landing/w.csv"
WATCHER_ARGS = '{"filepath":"/landing/w.csv","poke_interval":1.0,"stable_for":0.0}'
WATCHERS_HOSTILE = st.one_of(
    NOT_TEXT,
    JSON_TEXTS,
    st.sampled_from(
        [
            f'[["{WATCHED}","landing","file",{json.dumps(WATCHER_ARGS)}]]',
            '[["s3://elsewhere","n","file","{}"]]',
            f'[["{WATCHED}","","file","{{}}"]]',
            f'[["{WATCHED}","n","no kind!","{{}}"]]',
            f'[["{WATCHED}","n","file","[1]"]]',
            f'[["{WATCHED}","n","file",7]]',
            f'[["{WATCHED}","n","file"]]',
            f'[["{WATCHED}","b","file","{{}}"],["{WATCHED}","a","file","{{}}"]]',
            "[" + ",".join(f'["{WATCHED}","n{i:02}","file","{{}}"]' for i in range(12)) + "]",
            f'[["{WATCHED}","n","file","' + "{" * 40 + '"]]',
        ]
    ),
)


def _watched_sim() -> Sim:
    from raftsched.core import asset_watchers as aw
    from raftsched.core.model import Schedule, ScheduleKind

    sim = Sim()
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=vs.RELEASE)).ok
    spec = replace(
        dag("w", task("t")),
        schedule=Schedule(ScheduleKind.NONE, display="assets"),
        asset_condition=json.dumps(WATCHED),
        asset_watchers=aw.canonical_json([(WATCHED, "landing", "file", WATCHER_ARGS)]),
    )
    assert sim.register(spec).ok
    return sim


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cut=st.integers(0, 30))
def test_hostile_firings_and_specs_of_a_watched_asset_never_break_apply(
    data: st.DataObject, cut: int
) -> None:
    """Watcher triggers leased, renewed, fired (hostile events and errors, stale tokens,
    repeats), their DAG re-registered with hostile watchers or removed: apply stays total,
    the digest incremental, and a replica restored part-way agrees."""
    sim = _watched_sim()
    kinds = [c.LeaseTriggers, c.HeartbeatTriggers, c.FireTriggers, c.TimeoutTriggers]
    for step in range(data.draw(st.integers(1, 6))):
        now = at(step * 20)
        grants = sim.apply(
            c.LeaseTriggers(request_id=sim.rid(), now=now, triggerer_id="t1", max_triggers=5)
        )
        for grant in grants.value or ():
            key = TaskKey(grant["dag_id"], grant["run_id"], grant["task_id"])
            event = data.draw(st.one_of(JSON_TEXTS, st.just('{"identity":"1:2:3"}')))
            firing = c.TriggerFiring(c.TriggerRef(key, grant["token"]), event)
            _apply_checked(
                sim,
                c.FireTriggers(request_id=sim.rid(), now=now, triggerer_id="t1", firings=(firing,)),
            )
        kind = data.draw(st.sampled_from(kinds))
        _apply_checked(sim, BUILDERS[kind](data.draw, sim, sim.rid(), now))
        if data.draw(st.integers(0, 3)) == 0:
            base = sim.state.catalog.records["w"].spec
            text = data.draw(WATCHERS_HOSTILE)
            spec = replace(base, spec_hash="", asset_watchers=text)
            _apply_checked(sim, c.RegisterDags(request_id=sim.rid(), now=now, specs=(spec,)))
        if data.draw(st.integers(0, 9)) == 0:
            _apply_checked(sim, c.RemoveDags(request_id=sim.rid(), now=now, dag_ids=("w",)))
    _check_replay(sim, cut)
