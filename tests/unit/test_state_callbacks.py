"""Callback jobs in the state machine: events -> jobs, leases, completion, idempotence,
eviction, bounds, deadline alerts, snapshots and digests."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import callback_table as ct
from raftsched.core import commands as c
from raftsched.core import handlers_callbacks as hc
from raftsched.core import results as r
from raftsched.core.callbacks import missed_deadlines
from raftsched.core.model import DagSpec
from raftsched.core.state import SchedulerState
from raftsched.core.validate import check_command, check_spec
from raftsched.errors import LimitExceeded

NOTIFY = ("failure", "notify", "{}")


def sim_with(*tasks, **dag_kw) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", *tasks, **dag_kw)).ok
    sim.create("d")
    return sim


def lease_callbacks(sim: Sim, worker: str = "w1", n: int = 10, now=T0, ttl: float = 60.0):
    cmd = c.LeaseCallbacks(
        request_id=sim.rid(), now=now, worker_id=worker, max_jobs=n, lease_ttl_seconds=ttl
    )
    result = sim.apply(cmd)
    assert result.ok, result
    return list(result.value)


def complete_callback(sim: Sim, grant, success: bool = True, now=T0, worker: str = "w1", **kw):
    return sim.apply(
        c.CompleteCallback(
            request_id=sim.rid(),
            now=now,
            worker_id=worker,
            job_id=grant["job_id"],
            token=grant["token"],
            success=success,
            **kw,
        )
    )


def jobs(sim: Sim) -> list[ct.CallbackJob]:
    return list(sim.state.callbacks.jobs())


def test_spec_without_callbacks_keeps_its_dict_and_hash() -> None:
    spec = dag("d", task("a"))
    with_default = DagSpec.from_dict(spec.to_dict())
    assert "callbacks" not in spec.to_dict()
    assert "deadline_seconds" not in spec.to_dict()
    assert "callbacks" not in spec.to_dict()["tasks"][0]
    assert with_default.compute_hash() == spec.compute_hash()


def test_spec_with_callbacks_round_trips() -> None:
    spec = dag(
        "d",
        task("a", callbacks=(NOTIFY, ("retry", "raftsched:webhook", '{"conn_id": "hook"}'))),
        callbacks=(("success", "done", "{}"),),
        deadline_seconds=60.0,
    )
    back = DagSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    assert back.compute_hash() == spec.compute_hash() != dag("d", task("a")).compute_hash()
    check_spec(spec)


@pytest.mark.parametrize(
    "callbacks",
    [
        (("deadline", "fn", "{}"),),  # not a task event
        (("failure", "", "{}"),),
        (("failure", "raftsched:pager", "{}"),),  # no such notifier
        (("failure", "fn", "[1]"),),
        (("failure", "fn", "{"),),
        (NOTIFY,) * 9,
        ("failure",),
    ],
)
def test_bad_task_callbacks_are_refused(callbacks) -> None:
    with pytest.raises(LimitExceeded):
        check_spec(dag("d", task("a", callbacks=callbacks)))


def test_failure_success_and_retry_make_one_job_each() -> None:
    sim = sim_with(
        task("a", retries=1, callbacks=(NOTIFY, ("retry", "on_retry", "{}"))),
        task("b", callbacks=(("success", "on_ok", "{}"),)),
        callbacks=(("failure", "run_failed", "{}"),),
    )
    sim.run_task("b")
    sim.run_task("a", success=False)  # up for retry
    assert [j.event for j in jobs(sim)] == ["success", "retry"]
    retry_at = sim.ti("a").next_retry_at
    sim.apply(
        c.QueueTasks(
            request_id=sim.rid(),
            now=retry_at,
            items=(c.QueueDecision(sim.ti("a").key, sim.ti("a").state, 1),),
        )
    )
    sim.run_task("a", success=False, now=retry_at)  # fails for good: the run fails
    found = jobs(sim)
    assert [(j.task_id, j.try_number, j.event, j.callable_ref) for j in found] == [
        ("b", 1, "success", "on_ok"),
        ("a", 1, "retry", "on_retry"),
        ("a", 2, "failure", "notify"),
        ("", 0, "failure", "run_failed"),
    ]
    context = json.loads(found[2].context_json)
    assert context["dag_id"] == "d" and context["run_id"] == run_id()
    assert context["task_id"] == "a" and context["try_number"] == 2
    assert context["state"] == "failed" and context["event"] == "failure"
    assert context["logical_date"] == T0.isoformat()
    assert json.loads(found[3].context_json)["message"].startswith("task(s) failed: a")
    assert found[3].log_task_id == "__callbacks__"
    assert sim.state.recompute_digest() == sim.state.digest()


def test_lease_complete_and_logs_once() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)))
    sim.run_task("a", success=False)
    grants = lease_callbacks(sim)
    assert len(grants) == 1 and grants[0]["callable_ref"] == "notify"
    assert lease_callbacks(sim, worker="w2") == []  # leased: nobody else gets it
    before = len(sim.outbox("task_log"))
    chunk = c.LogChunk("stdout", "posted\n")
    assert complete_callback(sim, grants[0], chunks=(chunk,)).ok
    logs = sim.outbox("task_log")[before:]
    assert [entry["text"] for entry in logs][1] == "posted\n"
    assert {(e["task_id"], e["try_number"]) for e in logs} == {("a", 1)}
    assert all(e["chunk_seq"] > hc.LOG_SEQ_BASE for e in logs)
    # done: never leased again, a repeat of its completion is refused
    again = complete_callback(sim, grants[0])
    assert not again.ok and again.reason == r.STALE_TOKEN
    assert lease_callbacks(sim, now=at(60)) == []
    assert [j.state for j in jobs(sim)] == ["success"]
    assert lease_callbacks(sim, now=at(3600 * 2)) == []  # and, past its retention, forgotten
    assert complete_callback(sim, grants[0]).reason == hc.UNKNOWN_CALLBACK


def test_a_failed_callback_is_final() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)))
    sim.run_task("a", success=False)
    (grant,) = lease_callbacks(sim)
    assert complete_callback(sim, grant, success=False, message="boom").ok
    assert lease_callbacks(sim, now=at(1000)) == []
    assert [(j.state, j.message) for j in jobs(sim)] == [("failed", "boom")]


def test_wrong_worker_and_stale_token_are_refused() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)))
    sim.run_task("a", success=False)
    (grant,) = lease_callbacks(sim, ttl=10)
    assert complete_callback(sim, grant, worker="w2").reason == r.WRONG_WORKER
    # its lease expires: another worker gets it, the first one's outcome is refused
    (again,) = lease_callbacks(sim, worker="w2", now=at(11))
    assert again["token"] != grant["token"] and again["attempt"] == 2
    assert complete_callback(sim, grant, now=at(12)).reason == r.STALE_TOKEN
    assert complete_callback(sim, again, worker="w2", now=at(12)).ok


def test_leases_that_keep_expiring_end_the_job() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)))
    sim.run_task("a", success=False)
    for i in range(ct.MAX_ATTEMPTS):
        assert len(lease_callbacks(sim, now=at(i * 100), ttl=10)) == 1
    assert lease_callbacks(sim, now=at(1000)) == []
    (job,) = jobs(sim)
    assert job.state == "failed" and "expired" in job.message


def test_the_same_event_makes_no_second_job() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)))
    sim.run_task("a", success=False)
    (job,) = jobs(sim)
    rec = sim.state.run_table.get("d", run_id())
    assert not sim.state.callbacks.add(job, T0)  # the same id: a no-op
    from raftsched.core.callbacks import on_task_end

    on_task_end(sim.state, rec, sim.ti("a"), T0)
    assert len(jobs(sim)) == 1


def test_finished_jobs_are_evicted_and_open_jobs_bounded(monkeypatch) -> None:
    monkeypatch.setattr(ct, "MAX_OPEN_JOBS", 3)
    monkeypatch.setattr(ct, "MAX_DONE_JOBS", 2)
    sim = Sim()
    sim.register(dag("d", task("a", callbacks=(NOTIFY,))))
    for day in range(5):
        sim.create("d", T0 + timedelta(days=day))
        sim.run_task("a", success=False)
    table = sim.state.callbacks
    assert table.open_count == 3 and table.dropped == 2
    for grant in lease_callbacks(sim):
        assert complete_callback(sim, grant).ok
    assert table.open_count == 0 and len(list(table.jobs())) == 2  # the oldest left
    lease_callbacks(sim, now=at(ct.DONE_RETENTION_SECONDS + 1))  # evicts them by age
    assert len(list(table.jobs())) == 0
    sim.create("d", T0 + timedelta(days=9), now=at(ct.DONE_RETENTION_SECONDS + 1))
    sim.run_task("a", success=False, now=at(ct.DONE_RETENTION_SECONDS + 1))
    assert [j.state for j in table.jobs()] == ["pending"]
    assert sim.state.recompute_digest() == sim.state.digest()


def test_deadline_alerts_once_and_only_when_due() -> None:
    sim = sim_with(task("a"), deadline_seconds=600.0, callbacks=(("deadline", "late", "{}"),))
    ref = ("d", run_id())

    def miss(now):
        return sim.apply(c.MissDeadlines(request_id=sim.rid(), now=now, runs=(ref,)))

    assert missed_deadlines(sim.state, at(599)) == []  # what the leader proposes
    assert missed_deadlines(sim.state, at(600)) == [ref]
    assert miss(at(599)).value[0].reason == r.NOT_DUE
    assert miss(at(600)).ok
    assert missed_deadlines(sim.state, at(700)) == []  # alerted: never proposed again
    assert miss(at(700)).value[0].reason == hc.ALREADY_ALERTED
    (job,) = jobs(sim)
    assert job.event == "deadline" and job.callable_ref == "late"
    sim.run_task("a", now=at(800))
    assert miss(at(900)).value[0].reason == r.STATE_CHANGED


def test_deadline_index_follows_the_current_spec_and_restore() -> None:
    late = (("deadline", "late", "{}"),)
    sim = sim_with(task("a"), deadline_seconds=600.0, callbacks=late)
    assert sim.register(dag("quiet", task("a"))).ok
    assert list(sim.state.catalog.with_deadline) == ["d"]
    back = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert list(back.catalog.with_deadline) == ["d"]
    assert missed_deadlines(back, at(600)) == [("d", run_id())]
    assert sim.register(dag("d", task("a"))).ok  # the new version has no deadline
    assert list(sim.state.catalog.with_deadline) == []
    assert missed_deadlines(sim.state, at(600)) == []


def test_snapshot_round_trip_and_digest() -> None:
    sim = sim_with(task("a", callbacks=(NOTIFY,)), deadline_seconds=1.0,
                   callbacks=(("deadline", "late", "{}"),))  # fmt: skip
    sim.apply(c.MissDeadlines(request_id=sim.rid(), now=at(5), runs=(("d", run_id()),)))
    sim.run_task("a", success=False, now=at(6))
    lease_callbacks(sim, n=1, now=at(6))
    snap = json.loads(json.dumps(sim.state.snapshot()))
    back = SchedulerState.restore(snap)
    assert back.digest() == sim.state.digest()
    assert list(back.callbacks.jobs()) == list(sim.state.callbacks.jobs())
    assert "callbacks" not in SchedulerState().snapshot()


def test_commands_are_bounded() -> None:
    now = T0
    with pytest.raises(LimitExceeded):
        check_command(c.LeaseCallbacks(request_id="x", now=now, worker_id="w", max_jobs=0))
    with pytest.raises(LimitExceeded):
        check_command(
            c.CompleteCallback(
                request_id="x", now=now, worker_id="w", job_id="", token=1, success=True
            )
        )
    with pytest.raises(LimitExceeded):
        check_command(c.MissDeadlines(request_id="x", now=now, runs=(("d",),)))


def test_a_big_conf_stays_out_of_the_job() -> None:
    from raftsched.core.callbacks import MAX_CONTEXT_CHARS

    sim = Sim()
    sim.register(dag("d", task("a", callbacks=(NOTIFY,))))
    sim.create("d", conf={"blob": "x" * (MAX_CONTEXT_CHARS + 10)})
    sim.run_task("a", success=False)
    (job,) = jobs(sim)
    context = json.loads(job.context_json)
    assert context["conf"] == {} and context["conf_omitted"] is True
    assert len(job.context_json) < MAX_CONTEXT_CHARS
    (grant,) = lease_callbacks(sim)
    assert complete_callback(sim, grant).ok
    assert [(j.state, j.context_json) for j in jobs(sim)] == [("success", "")]  # kept small


def test_a_callback_lease_reads_its_notifiers_connection_only() -> None:
    from raftsched.api.servicers.secrets import callback_connections
    from raftsched.core.model import TaskKey

    hook = ("failure", "raftsched:webhook", '{"conn_id": "hook"}')
    sim = sim_with(task("a", callbacks=(hook, NOTIFY)))
    sim.run_task("a", success=False)
    first, second = lease_callbacks(sim, n=1), lease_callbacks(sim, n=1)
    key = TaskKey("d", run_id(), "a")
    assert callback_connections(sim.state, key, first[0]["token"], "w1") == ["hook"]
    assert callback_connections(sim.state, key, second[0]["token"], "w1") == []  # a function
    assert callback_connections(sim.state, key, first[0]["token"], "w2") == []
    assert complete_callback(sim, first[0]).ok
    assert callback_connections(sim.state, key, first[0]["token"], "w1") == []  # done
