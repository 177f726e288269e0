from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from test_state_harness import dag, task

from raftsched.core.model import TaskKey, TaskState, TriggerRule
from raftsched.core.ready import (
    DEFAULT_MAX_RETRY_DELAY_SECONDS,
    ReadyQueue,
    TimeIndex,
    Topology,
    UpstreamCounts,
    Verdict,
    evaluate_trigger,
    next_retry_at,
    retry_delay_seconds,
)

S, F, UF, SK, R, N = (
    TaskState.SUCCESS,
    TaskState.FAILED,
    TaskState.UPSTREAM_FAILED,
    TaskState.SKIPPED,
    TaskState.RUNNING,
    TaskState.NONE,
)
W, READY, UFV, SKV = Verdict.WAIT, Verdict.READY, Verdict.UPSTREAM_FAILED, Verdict.SKIPPED

TRIGGER_TABLE = [
    # rule, upstream states, verdict
    ("all_success", [], READY),
    ("all_success", [S, S], READY),
    ("all_success", [S, R], W),
    ("all_success", [S, F], UFV),
    ("all_success", [R, UF], UFV),
    ("all_success", [S, SK], SKV),
    ("all_success", [SK, F], UFV),
    ("all_failed", [F, UF], READY),
    ("all_failed", [F, R], W),
    ("all_failed", [F, S], SKV),
    ("all_failed", [F, SK], SKV),
    ("all_failed", [], READY),
    ("all_done", [S, F, UF, SK], READY),
    ("all_done", [S, R], W),
    ("all_done", [TaskState.UP_FOR_RETRY], W),
    ("one_success", [S, R], READY),
    ("one_success", [F, R], W),
    ("one_success", [F, SK], UFV),
    ("one_success", [SK, SK], SKV),
    ("one_success", [UF], UFV),
    ("one_failed", [F, R], READY),
    ("one_failed", [UF, N], READY),
    ("one_failed", [S, R], W),
    ("one_failed", [S, SK], SKV),
    ("none_failed", [S, SK], READY),
    ("none_failed", [SK, SK], READY),
    ("none_failed", [S, R], W),
    ("none_failed", [S, F], UFV),
    ("none_failed", [UF, R], UFV),
]


@pytest.mark.parametrize(("rule", "states", "verdict"), TRIGGER_TABLE)
def test_trigger_rules(rule: str, states: list[TaskState], verdict: Verdict) -> None:
    assert evaluate_trigger(TriggerRule(rule), UpstreamCounts.of(states)) is verdict


def test_trigger_rule_accepts_plain_strings() -> None:
    assert evaluate_trigger("all_done", UpstreamCounts.of([S])) is READY  # type: ignore[arg-type]


RETRY_TABLE = [
    # retry_delay, exponential, max_retry_delay, try_number, expected seconds
    (300.0, False, None, 1, 300.0),
    (300.0, False, None, 5, 300.0),
    (300.0, False, 60.0, 1, 60.0),
    (10.0, True, None, 1, 10.0),
    (10.0, True, None, 2, 20.0),
    (10.0, True, None, 4, 80.0),
    (10.0, True, 50.0, 4, 50.0),
    (10.0, True, None, 10_000, DEFAULT_MAX_RETRY_DELAY_SECONDS),
    (10.0, True, 1e12, 10_000, 1e12),
    (-5.0, False, None, 1, 0.0),
]


@pytest.mark.parametrize(("delay", "exponential", "cap", "try_number", "expected"), RETRY_TABLE)
def test_retry_delay(
    delay: float, exponential: bool, cap: float | None, try_number: int, expected: float
) -> None:
    spec = task(
        "t",
        retry_delay_seconds=delay,
        retry_exponential_backoff=exponential,
        max_retry_delay_seconds=cap,
    )
    assert retry_delay_seconds(spec, try_number) == expected


def test_next_retry_at_adds_the_delay() -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    spec = task("t", retry_delay_seconds=10, retry_exponential_backoff=True)
    assert next_retry_at(spec, 3, now) == now + timedelta(seconds=40)


def test_topology() -> None:
    topo = Topology(dag("d", task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c", "x")))
    assert topo.downstream == {"a": ("b", "c"), "b": ("d",), "c": ("d",), "d": ()}
    assert topo.upstream["d"] == ("b", "c")  # the unknown "x" is ignored
    assert topo.leaves == {"d"}
    assert topo.descendants(["b"]) == {"b", "d"}
    assert topo.descendants(["a"]) == {"a", "b", "c", "d"}


def key(dag_id: str, task_id: str) -> TaskKey:
    return TaskKey(dag_id, "r", task_id)


T = datetime(2024, 1, 1, tzinfo=UTC)


def test_ready_queue_orders_by_priority_then_queued_at_then_key() -> None:
    queue = ReadyQueue()
    queue.push(key("d", "b"), 1, T)
    queue.push(key("d", "a"), 1, T)
    queue.push(key("d", "late"), 1, T - timedelta(seconds=1))
    queue.push(key("e", "urgent"), 10, T + timedelta(hours=1))
    order = [queue.pop(lambda _: True) for _ in range(5)]
    assert [k.task_id if k else None for k in order] == ["urgent", "late", "a", "b", None]


def test_ready_queue_skips_full_dags_until_unblocked() -> None:
    queue = ReadyQueue()
    for i in range(5):
        queue.push(key("full", f"t{i}"), 100, T)
    queue.push(key("free", "x"), 1, T)
    assert queue.pop(lambda dag_id: dag_id != "full") == key("free", "x")
    assert queue.pop(lambda dag_id: dag_id != "full") is None
    assert len(queue) == 5
    queue.unblock("full")
    assert queue.pop(lambda _: True) == key("full", "t0")


def test_ready_queue_discard_and_requeue() -> None:
    queue = ReadyQueue()
    queue.push(key("d", "a"), 1, T)
    queue.push(key("d", "b"), 1, T)
    queue.discard(key("d", "a"))
    assert key("d", "a") not in queue
    queue.push(key("d", "a"), 1, T)  # the same sort key again: only one live entry
    assert [queue.pop(lambda _: True) for _ in range(3)] == [key("d", "a"), key("d", "b"), None]


def test_ready_queue_survives_many_stale_entries() -> None:
    queue = ReadyQueue()
    for i in range(3000):
        queue.push(key("d", f"t{i:05}"), 1, T)
        queue.discard(key("d", f"t{i:05}"))
    queue.push(key("d", "last"), 1, T)
    assert queue.pop(lambda _: True) == key("d", "last")


def test_time_index_due_reads_without_popping() -> None:
    live: dict[str, datetime] = {}
    index: TimeIndex[str] = TimeIndex(lambda k, when: live.get(k) == when)
    for i in range(10):
        live[f"k{i}"] = T + timedelta(seconds=i)
        index.push(live[f"k{i}"], f"k{i}")
    live["k2"] = T + timedelta(seconds=100)  # moved: the old entry is stale
    index.push(live["k2"], "k2")
    assert index.due(T + timedelta(seconds=4)) == ["k0", "k1", "k3", "k4"]
    assert index.due(T + timedelta(seconds=4), limit=2) == ["k0", "k1"]
    assert len(index) == 11
    assert list(index.pop_due(T + timedelta(seconds=1))) == ["k0", "k1"]
    del live["k3"]
    index.prune(len(live))
    assert index.due(T + timedelta(seconds=200)) == ["k4", "k5", "k6", "k7", "k8", "k9", "k2"]
