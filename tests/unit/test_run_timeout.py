"""dagrun_timeout (core/run_timeout.py): the leader's walk finds runs past it, apply re-checks
against the command's time and fails the run in one apply, unfinished task instances SKIPPED
with the reason, a running attempt's lease revoked; a second or early decision changes
nothing; the failure callback says why."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core import versions
from raftsched.core.run_timeout import TIMED_OUT, TimeoutRuns, timed_out_runs
from raftsched.core.state import SchedulerState

RUN = ("d", run_id())


def sim_of(timeout: float | None = 60.0, **kw: Any) -> Sim:
    sim = Sim()
    spec = dag("d", task("a"), task("b", "a"), dagrun_timeout_seconds=timeout, **kw)
    assert sim.register(spec).ok
    assert sim.create("d", now=at(0)).ok
    return sim


def time_out(sim: Sim, now: Any) -> Any:
    return sim.apply(TimeoutRuns(request_id=sim.rid(), now=now, runs=(RUN,)))


def test_the_walk_finds_runs_past_their_timeout_only() -> None:
    sim = sim_of()
    assert timed_out_runs(sim.state, at(59)) == []
    assert timed_out_runs(sim.state, at(60)) == [RUN]
    assert timed_out_runs(sim_of(None).state, at(10_000)) == []
    # a restored replica (a follower from a snapshot) knows the timeout too
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert timed_out_runs(restored, at(60)) == [RUN]


def test_a_run_past_its_timeout_fails_running_attempts_end_and_the_rest_is_skipped() -> None:
    sim = sim_of()
    grant = sim.lease(now=at(1))[0]  # a is running
    assert not time_out(sim, at(59)).value[0].ok  # early: re-checked against now
    assert time_out(sim, at(61)).value[0].ok
    assert sim.run().state == "failed"
    assert sim.states() == {"a": "skipped", "b": "skipped"}
    assert sim.ti("a").message.startswith(TIMED_OUT)
    # the worker's lease is revoked: its heartbeat and outcome are refused
    beat = c.HeartbeatLeases(
        request_id=sim.rid(),
        now=at(62),
        worker_id="w1",
        leases=(c.LeaseRef(grant.lease.key, grant.lease.token),),
    )
    assert not sim.apply(beat).value[0].ok
    assert not sim.complete(grant, now=at(63)).ok
    assert sim.run().state == "failed"
    # a second decision (a new leader's) changes nothing
    again = time_out(sim, at(64)).value[0]
    assert (again.ok, again.reason) == (False, r.STATE_CHANGED)
    assert sim.state.digest() == sim.state.recompute_digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


def test_a_finished_run_is_not_timed_out() -> None:
    sim = sim_of()
    sim.run_task("a", now=at(1))
    sim.run_task("b", now=at(2))
    assert sim.run().state == "success"
    assert timed_out_runs(sim.state, at(1000)) == []
    assert not time_out(sim, at(1000)).value[0].ok


def test_the_failure_callback_gives_the_timeout_as_its_reason() -> None:
    sim = sim_of(callbacks=(("failure", "notify", "{}"),))
    assert time_out(sim, at(61)).value[0].ok
    jobs = [j for j in sim.state.callbacks.jobs() if j.event == "failure"]
    assert len(jobs) == 1
    context = json.loads(jobs[0].context_json)
    assert context["message"].startswith(TIMED_OUT) and context["state"] == "failed"


def test_timeout_runs_and_a_spec_with_a_timeout_are_refused_before_version_3() -> None:
    cmd = TimeoutRuns(request_id="x", now=T0, runs=(RUN,))
    assert versions.refusal(cmd, 2) is not None and versions.refusal(cmd, 3) is None
    spec = dag("d", task("a"), dagrun_timeout_seconds=5.0)
    register = c.RegisterDags(request_id="y", now=T0, specs=(spec,))
    assert versions.refusal(register, 2) is not None and versions.refusal(register, 3) is None


def test_a_malformed_timeout_runs_is_refused_before_it_changes_anything() -> None:
    sim = sim_of()
    bad = TimeoutRuns(request_id="z", now=at(61), runs=(("d",),))  # type: ignore[arg-type]
    assert sim.apply(bad).reason == r.INVALID
    assert sim.run().state != "failed"


@settings(max_examples=60, deadline=None)
@given(
    runs=st.one_of(
        st.lists(
            st.tuples(st.sampled_from(["d", "", "x" * 300]), st.sampled_from([run_id(), "r"])),
            max_size=3,
        ).map(tuple),
        st.sampled_from([None, "d", (("d",),), ((None, None),), [("d", run_id())], 7]),
    ),
    seconds=st.floats(-1e9, 1e9),
)
def test_hostile_timeout_runs_never_break_apply(runs: Any, seconds: float) -> None:
    sim = sim_of()
    try:
        now = at(seconds)
    except OverflowError:
        return
    result = sim.apply(TimeoutRuns(request_id=sim.rid(), now=now, runs=runs))
    assert result.reason != r.HALTED and not sim.state.halted
    assert sim.state.digest() == sim.state.recompute_digest()
