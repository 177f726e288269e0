"""Snapshots share equal values (core/snapshot_share.py) and restores decode them once
(core/restore_decode.py): the values stay those of the plain converters, and a state
restored from a snapshot file (read as a node reads it) is the state that was snapshotted."""

from __future__ import annotations

import gc
import pickle
from dataclasses import MISSING, fields, replace
from datetime import timedelta

from test_state_harness import T0, Sim, at, dag, task

from raftsched.core import restore_decode
from raftsched.core import snapshot as sn
from raftsched.core.model import DagSpec, Schedule, ScheduleKind
from raftsched.core.restore_decode import RestoreDecoder
from raftsched.core.state import SchedulerState
from raftsched.raft.snapshots import read_snapshot_file, write_snapshot_file


def busy() -> Sim:
    sim = Sim()
    template = (task("a"), task("b", "a", retries=2, retry_delay_seconds=1.5))
    sim.register(
        *(dag(f"t{i}", *template) for i in range(6)),  # one template: shared task dicts
        dag("other", task("x", env=(("K", "v"),)), task("y", "x", trigger_rule="all_done")),
        replace(
            dag("hourly", task("h", execution_timeout_seconds=30.0), start_date=T0, tags=("x",)),
            schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=3600, display="1h"),
        ),
    )
    for day in range(3):
        sim.create("t0", T0.replace(day=1 + day), now=at(day))
    sim.create("other", T0, now=at(4))
    grants = sim.lease(n=3, now=at(5))
    sim.complete(grants[0], now=at(6))
    sim.complete(grants[1], success=False, now=at(7))
    return sim


def test_a_snapshot_holds_the_plain_values_with_equal_strings_shared() -> None:
    state = busy().state
    snap = state.snapshot()
    for spec_hash, spec in state.catalog.specs.items():
        assert snap["specs"][spec_hash] == spec.to_dict()
    entries = [[e.seq, e.kind.value, e.data] for e in state.outbox]
    assert snap["outbox"]["entries"] == entries
    t1, t2 = (snap["specs"][state.dags[d].spec.spec_hash] for d in ("t1", "t2"))
    assert t1["tasks"][0] is t2["tasks"][0]  # one template: one dict per task
    dates = [r["updated_at"] for r in snap["dags"]]
    assert all(d is dates[0] for d in dates)  # one text per instant
    # the state's own dicts are copied, never rewritten
    assert all(a[2] is not b[2] for a, b in zip(snap["outbox"]["entries"], entries, strict=True))


def test_restore_from_the_file_equals_the_snapshotted_state(tmp_path) -> None:
    sim = busy()
    dump = str(tmp_path / "raft.dump")
    assert write_snapshot_file(sim.state, ("raft",), dump) == 0
    gc.enable()
    payload = read_snapshot_file(dump)
    assert gc.isenabled()  # paused only while unpickling
    restored = SchedulerState.restore(payload["state"])
    assert payload["raft"] == ("raft",)
    assert restored.digest() == sim.state.digest() == restored.recompute_digest()
    assert restored.snapshot() == sim.state.snapshot()
    # and it goes on as the original does
    twin = Sim()
    twin.state, twin.index, twin.requests = restored, sim.index, sim.requests
    for s in (sim, twin):
        for grant in s.lease(n=5, now=at(20)):
            s.complete(grant, now=at(21))
    assert restored.digest() == sim.state.digest()


def test_the_decoder_builds_what_the_plain_readers_build() -> None:
    state = busy().state
    snap = pickle.loads(pickle.dumps(state.snapshot()))
    decode = RestoreDecoder()
    for data in snap["specs"].values():
        fast, plain = decode.spec(data), DagSpec.from_dict(data)
        assert fast == plain and repr(fast) == repr(plain)
    # values equal across types stay apart: 60 and 60.0, True and 1
    base = next(iter(snap["specs"].values()))
    a = {**base, "schedule": {"kind": "interval", "interval_seconds": 60, "display": ""}}
    b = {**base, "schedule": {"kind": "interval", "interval_seconds": 60.0, "display": ""}}
    assert repr(decode.spec(a).schedule) != repr(decode.spec(b).schedule)
    unknown = {**base, "added_later": 1}  # a key this release does not know: the plain reader
    assert decode.spec(unknown) == DagSpec.from_dict(unknown)
    for _, encoded in snap["dedup"]:
        assert repr(restore_decode.result(encoded)) == repr(sn.decode_value(encoded))


def every_field_set() -> DagSpec:
    """A spec with every field away from its default (and dated, tagged, with tasks): a field
    the decoder left out would come back at its default and differ."""
    spec = DagSpec(
        dag_id="every",
        fileloc="/dags/every.py",
        schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=90, display="90s"),
        timezone="Europe/Paris",
        start_date=T0,
        end_date=T0 + timedelta(days=30),
        catchup=True,
        max_active_runs=3,
        max_active_tasks=5,
        tags=("a", "b"),
        description="every field",
        tasks=(task("a", outlets=("s3://a",)), task("b", "a", retries=1, inlets=("s3://a",))),
        params_json='{"p":1}',
        callbacks=(("failure", "notify", "{}"),),
        deadline_seconds=600.0,
        overlap="buffer_all",
        catchup_window_seconds=3600.0,
        max_runs=7,
        jitter_seconds=30.0,
        pause_on_failure=True,
        dst_repeated="twice",
        dst_skipped="skip",
        dagrun_timeout_seconds=90.0,
        asset_condition='{"all":["s3://a","s3://b"]}',
        asset_watchers='[["s3://a","landing","file","{\\"filepath\\":\\"/in\\"}"]]',
    )
    return replace(spec, spec_hash=spec.compute_hash())


def test_the_decoder_reads_every_dagspec_field() -> None:
    names = {f.name for f in fields(DagSpec)}
    assert names == restore_decode._SPEC_KEYS
    spec = every_field_set()
    at_default = [
        f.name
        for f in fields(DagSpec)
        if f.default is not MISSING and getattr(spec, f.name) == f.default
    ]
    assert not at_default, f"give every_field_set() a non-default value for {at_default}"
    data = pickle.loads(pickle.dumps(spec.to_dict()))
    assert set(data) == names  # no field left out of the dict the decoder reads
    fast, plain = RestoreDecoder().spec(data), DagSpec.from_dict(data)
    for name in names:  # field by field: a name for the one the decoder got wrong
        assert repr(getattr(fast, name)) == repr(getattr(plain, name)), name
    assert fast == plain == spec


def test_a_snapshot_of_a_restored_state_shares_its_tasks_by_identity() -> None:
    state = SchedulerState.restore(busy().state.snapshot())
    specs = state.snapshot()["specs"]
    tasks = [t for data in specs.values() for t in data["tasks"]]
    assert len({id(t) for t in tasks}) == len({repr(t) for t in tasks})
