"""The node's counters and histograms (cluster/metrics.py ``NodeInstruments``): lease counters
and the schedule lag from applied commands and results, leader changes by term, and one
registry per node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from raftsched.cluster import metrics
from raftsched.cluster.metrics import METRIC_NAMES, NodeInstruments, NodeMetrics
from raftsched.core.commands import Batch, ExpireLeases, LeaseTasks
from raftsched.core.model import TaskKey
from raftsched.core.results import Item, Result

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _value(inst: NodeInstruments, name: str) -> float:
    value = inst.registry.get_sample_value(name)
    return 0.0 if value is None else value


def _grant(run_id: str, task_id: str = "t", logical_date: datetime = T0) -> Any:
    key = TaskKey("d", run_id, task_id)
    return SimpleNamespace(lease=SimpleNamespace(key=key), logical_date=logical_date)


def _lease(now: datetime) -> LeaseTasks:
    return LeaseTasks(request_id="r", now=now, worker_id="w")


def test_lease_grants_count_and_the_first_lease_of_a_scheduled_run_gives_the_lag() -> None:
    inst = NodeInstruments()
    sched = "scheduled__2026-01-01T12:00:00+00:00"
    grants = (_grant(sched, "a"), _grant(sched, "b"), _grant("manual__x"))
    inst.on_apply(5, _lease(T0 + timedelta(seconds=3)), Result(True, value=grants))
    assert _value(inst, "raftsched_leases_granted_total") == 3
    assert _value(inst, "raftsched_schedule_lag_seconds_count") == 1  # one scheduled run
    assert _value(inst, "raftsched_schedule_lag_seconds_sum") == 3.0
    # a later task of the same run, and a repeated request, add no lag and no grant
    inst.on_apply(6, _lease(T0 + timedelta(seconds=9)), Result(True, value=(_grant(sched),)))
    inst.on_apply(7, _lease(T0), Result(True, value=grants, duplicate=True))
    assert _value(inst, "raftsched_leases_granted_total") == 4
    assert _value(inst, "raftsched_schedule_lag_seconds_count") == 1


def test_expired_leases_count_only_the_items_that_applied_also_inside_a_batch() -> None:
    inst = NodeInstruments()
    expire = ExpireLeases(request_id="e", now=T0)
    result = Result.of_items([Item(True), Item(False, "not_expired"), Item(True)])
    inst.on_apply(3, expire, result)
    assert _value(inst, "raftsched_leases_expired_total") == 2
    batch = Batch(request_id="b", now=T0, commands=(expire, _lease(T0)))
    inner = (Result.of_items([Item(True)]), Result(True, value=(_grant("manual__y"),)))
    inst.on_apply(4, batch, Result(True, value=inner))
    assert _value(inst, "raftsched_leases_expired_total") == 3
    assert _value(inst, "raftsched_leases_granted_total") == 1


def test_leader_changes_count_each_new_term_once() -> None:
    inst = NodeInstruments()
    for term in (1, 1, 1, 2, 2, 1, 5):
        inst.note_leader(term)
    assert _value(inst, "raftsched_leader_changes_total") == 3


def test_each_node_renders_its_own_instruments_and_every_listed_name() -> None:
    status = {"role": "follower", "term": 2, "commit_index": 9, "applied_index": 9}
    status["outbox_size"] = 0
    first, second = NodeInstruments(), NodeInstruments()
    first.commit_latency.observe(0.01)
    body = NodeMetrics(lambda: status, first).render()[0].decode()
    other = NodeMetrics(lambda: status, second).render()[0].decode()
    assert "raftsched_commit_latency_seconds_count 1.0" in body
    assert "raftsched_commit_latency_seconds_count 0.0" in other
    assert 'raftsched_raft_role{role="follower"} 1.0' in body
    names = {line.split("{")[0].split()[0] for line in body.splitlines() if line[:1] != "#"}
    node_only = {"raftsched_raft_log_entries", "raftsched_runs", "raftsched_task_instances"}
    node_only |= {
        "raftsched_triggers_running",
        "raftsched_pool_slots",
        "raftsched_pool_queued_tasks",
        "raftsched_asset_events_total",
    }
    node_only |= {  # per-DAG series, read from the node's state (cluster/dag_metrics.py)
        "raftsched_dag_runs",
        "raftsched_dag_task_instances",
        "raftsched_dag_last_run_duration_seconds",
        "raftsched_task_last_duration_seconds",
    }
    leader_only = {
        "raftsched_db_watermark",
        "raftsched_db_ok",
        "raftsched_outbox_quarantined",
    }
    missing = set(METRIC_NAMES) - names - node_only - leader_only
    assert not missing, missing


def test_parts_without_a_node_get_detached_instruments() -> None:
    assert metrics.of(object()) is metrics.of(None)
    node = SimpleNamespace(instruments=NodeInstruments())
    assert metrics.of(node) is node.instruments


def test_skipped_slots_count_once_per_applied_skip_by_dag_and_reason() -> None:
    from raftsched.core.commands import CreateRuns, RunDecision

    inst = NodeInstruments()
    skip = RunDecision("d", T0, T0, T0, skip_reason="overlap", skipped_slots=3)
    gap = RunDecision("d", T0, T0, T0, skip_reason="catchup")  # not counted: once
    run = RunDecision("d", T0, T0, T0)
    command = CreateRuns(request_id="c", now=T0, runs=(skip, gap, run, skip))
    result = Result.of_items([Item(True), Item(True), Item(True), Item(False, "run_exists")])
    inst.on_apply(8, command, result)
    inst.on_apply(8, command, Result(True, value=result.value, duplicate=True))
    sample = inst.registry.get_sample_value
    assert sample("raftsched_slots_skipped_total", {"dag": "d", "reason": "overlap"}) == 3
    assert sample("raftsched_slots_skipped_total", {"dag": "d", "reason": "catchup"}) == 1
    # a year paused at one minute: one range, its slots counted (core/skip_causes.py)
    year = RunDecision("d", T0, T0, T0, skip_reason="paused", skipped_slots=525_599)
    paused = CreateRuns(request_id="p", now=T0, runs=(year,))
    inst.on_apply(9, paused, Result.of_items([Item(True)]))
    assert sample("raftsched_slots_skipped_total", {"dag": "d", "reason": "paused"}) == 525_599
