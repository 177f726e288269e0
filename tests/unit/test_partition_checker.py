"""The partition checker finds each planted violation, and passes a clean history."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from raftsched.core.model import DagSpec, Schedule, ScheduleKind
from scripts.partition import nemesis, report, schedule
from scripts.partition.checker import Verdict, all_ok, check, format_verdicts
from scripts.partition.history import (
    AttemptRow,
    DigestSample,
    Execution,
    History,
    NodeStatus,
    RunRow,
    load_executions,
    with_tokens,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def spec(dag_id: str = "every_5s", *, catchup: bool = True, every: int = 5) -> DagSpec:
    return DagSpec(
        dag_id=dag_id,
        fileloc=f"/dags/{dag_id}.py",
        schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=every),
        start_date=T0,
        catchup=catchup,
    )


def run(
    i: int, dag_id: str = "every_5s", run_id: str | None = None, state: str = "success"
) -> RunRow:
    when = T0 + 5 * i * S
    return RunRow(dag_id, run_id or f"scheduled__{when.isoformat()}", when, "scheduled", state)


def attempt(
    i: int, try_number: int, token: int, *, start: int, end: int | None, **kw
) -> AttemptRow:
    fields = {
        "dag_id": "every_5s",
        "run_id": run(i).run_id,
        "task_id": "work",
        "try_number": try_number,
        "state": "success",
        "worker_id": f"w{try_number}",
        "lease_token": token,
        "start_date": T0 + start * S,
        "end_date": None if end is None else T0 + end * S,
    }
    fields.update(kw)
    return AttemptRow(**fields)


def statuses(
    digest_b: str = "d1", *, last: int = 40, acked: int = 40, seen: int = 40
) -> list[NodeStatus]:
    base = {
        "role": "follower",
        "term": 3,
        "commit_index": 500,
        "applied_index": 500,
        "digest_index": 480,
        "outbox_last_seq": last,
        "outbox_acked_seq": acked,
        "db_watermark": None,
    }
    return [
        NodeStatus.from_json("a", {**base, "role": "leader", "digest": "d1", "db_watermark": seen}),
        NodeStatus.from_json("b", {**base, "digest": digest_b}),
        NodeStatus.from_json("c", None),
    ]


def clean() -> History:
    """Slots 0..10 (50 s), each with one run; run 2's task retried once after an expiry."""
    return History(
        dags=[spec()],
        runs=[run(i) for i in range(11)],
        attempts=[
            attempt(1, 1, 100, start=6, end=8),
            attempt(2, 1, 120, start=11, end=41, state="failed"),  # lease expired at 41
            attempt(2, 2, 150, start=42, end=44),
        ],
        statuses=statuses(),
        db_watermark=40,
        due_until=T0 + 50 * S,
        executions=[
            Execution("every_5s", run(1).run_id, "work", 100, "w1", T0 + 6.1 * S, T0 + 8 * S, 1),
            Execution("every_5s", run(2).run_id, "work", 120, "w1", T0 + 11 * S, T0 + 40 * S, 1),
            Execution("every_5s", run(2).run_id, "work", 150, "w2", T0 + 42 * S, T0 + 44 * S, 2),
        ],
        digest_samples=[DigestSample("a", 300, "x"), DigestSample("b", 300, "x")],
        expect_executions=True,
        taken_at=T0 + 60 * S,
    )


def kinds(verdicts: list[Verdict]) -> dict[str, set[str]]:
    return {v.invariant: {x.kind for x in v.violations} for v in verdicts if v.violations}


def test_clean_history_passes_every_invariant() -> None:
    verdicts = check(clean())
    assert all_ok(verdicts), format_verdicts(verdicts)
    assert [v.invariant for v in verdicts] == [
        "one_run_per_slot",
        "one_holder_per_attempt",
        "dispatch_only_after_commit",
        "nothing_committed_lost",
        "replicas_agree",
        "due_runs_finish",
    ]
    assert all(v.checked > 0 for v in verdicts)
    assert "PASS" in format_verdicts(verdicts)


def test_duplicate_run_for_a_slot_is_found() -> None:
    h = clean()
    h.runs = [*h.runs, run(3, run_id="manual__dup")]
    found = kinds(check(h))
    assert found == {"one_run_per_slot": {"DUPLICATE"}}


def test_gap_is_found_and_off_schedule_run_too() -> None:
    h = clean()
    h.runs = [r for r in h.runs if r.logical_date != T0 + 20 * S]
    h.runs.append(RunRow("every_5s", "odd", T0 + 7 * S, "scheduled"))
    verdict = check(h)[0]
    assert {v.kind for v in verdict.violations} == {"GAP", "OFF_SCHEDULE"}
    gap = next(v for v in verdict.violations if v.kind == "GAP")
    assert gap.data["logical_date"] == (T0 + 20 * S).isoformat()


def test_gaps_not_required_without_catchup_or_when_paused_or_not_yet_due() -> None:
    h = clean()
    h.runs = h.runs[:3]
    h.dags = [spec(catchup=False)]
    assert all_ok(check(h))
    h.dags = [spec()]
    h.paused = frozenset({"every_5s"})
    assert all_ok(check(h))
    h.paused = frozenset()
    h.due_until = T0 + 10 * S  # slots 0, 5 and 10 s are due and present
    assert all_ok(check(h))


def test_double_holder_is_found() -> None:
    h = clean()
    # try 2 leased at 30 s while try 1 (failed) ended only at 41 s
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], start_date=T0 + 30 * S)]
    assert kinds(check(h)) == {"one_holder_per_attempt": {"DOUBLE_HOLDER"}}


def test_never_fenced_attempt_is_a_double_holder() -> None:
    h = clean()
    h.attempts = [
        *h.attempts[:1],
        replace(h.attempts[1], state="running", end_date=None),
        h.attempts[2],
    ]
    assert kinds(check(h)) == {"one_holder_per_attempt": {"DOUBLE_HOLDER"}}


def test_success_from_a_superseded_token_is_found() -> None:
    h = clean()
    h.attempts = [
        *h.attempts[:1],
        replace(h.attempts[1], state="success", end_date=T0 + 43 * S),
        h.attempts[2],
    ]
    assert kinds(check(h)) == {"one_holder_per_attempt": {"STALE_SUCCESS"}}


def test_overlapping_executions_are_found() -> None:
    h = clean()
    other, first, second = h.executions
    h.executions = [other, replace(first, ended_at=T0 + 43 * S), second]
    assert kinds(check(h)) == {"one_holder_per_attempt": {"DOUBLE_EXECUTION"}}


def test_clock_jitter_within_tolerance_is_not_a_double_holder() -> None:
    h = clean()
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], start_date=T0 + 40.8 * S)]
    assert all_ok(check(h))


def test_reused_token_is_found() -> None:
    h = clean()
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], lease_token=120)]
    h.executions, h.expect_executions = [], False
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"TOKEN_REUSED"}}


def test_token_out_of_log_order_and_beyond_commit_are_found() -> None:
    h = clean()
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], lease_token=110)]
    h.executions, h.expect_executions = [], False
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"TOKEN_ORDER"}}
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], lease_token=9999)]
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"TOKEN_BEYOND_COMMIT"}}


def test_execution_under_an_uncommitted_token_is_found() -> None:
    h = clean()
    ghost = Execution("every_5s", run(5).run_id, "work", 130, "w9", T0 + 26 * S, T0 + 27 * S)
    h.executions = [*h.executions, ghost]
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"UNCOMMITTED_EXECUTION"}}
    h = clean()
    no_row = replace(ghost, token=None, try_number=1)  # a try no attempt row has
    h.executions = [*h.executions, no_row]
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"UNCOMMITTED_EXECUTION"}}


def test_execution_that_began_before_its_lease_is_found() -> None:
    h = clean()
    early = replace(h.executions[0], started_at=T0 + 5 * S)  # leased at 6 s
    h.executions = [early, *h.executions[1:]]
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"EXECUTED_BEFORE_LEASE"}}


def test_no_leased_attempt_fails_as_vacuous() -> None:
    h = clean()
    h.attempts, h.executions, h.expect_executions = [], [], False
    found = kinds(check(h))
    assert found["one_holder_per_attempt"] == {"VACUOUS"}
    assert found["dispatch_only_after_commit"] == {"VACUOUS"}
    assert all_ok(check(h, require_attempts=False))
    h = clean()
    h.attempts = [replace(a, lease_token=None, worker_id=None) for a in h.attempts]
    h.executions, h.expect_executions = [], False
    assert "VACUOUS" in kinds(check(h))["one_holder_per_attempt"]


def test_no_execution_recorded_fails_as_vacuous_and_success_without_one_is_phantom() -> None:
    h = clean()
    h.executions = []
    assert kinds(check(h)) == {"one_holder_per_attempt": {"VACUOUS", "PHANTOM_SUCCESS"}}
    h = clean()
    h.executions = h.executions[1:]  # run 1's success was never executed
    assert kinds(check(h)) == {"one_holder_per_attempt": {"PHANTOM_SUCCESS"}}


def test_stuck_run_is_found_and_running_ones_are_not() -> None:
    h = clean()
    h.runs = [*h.runs[:3], replace(h.runs[3], state="queued"), *h.runs[4:]]
    three = run(3).run_id
    h.attempts = [
        *h.attempts,
        attempt(3, 1, 160, start=16, end=18, state="failed", run_id=three),
        AttemptRow("every_5s", three, "work", 2, "queued", queued_at=T0 + 19 * S),
    ]
    h.executions = [
        *h.executions,
        Execution("every_5s", three, "work", 160, "w1", T0 + 16 * S, T0 + 18 * S, 1),
    ]
    verdict = check(h)[5]
    assert [v.kind for v in verdict.violations] == ["STUCK"]
    assert verdict.violations[0].data["run_id"] == three
    h.taken_at = T0 + 40 * S  # queued 21 s ago: within the 30 s grace, still waiting
    assert all_ok(check(h))
    retrying = AttemptRow("every_5s", three, "work", 2, "up_for_retry")
    h.attempts = [*h.attempts[:-1], retrying]
    h.taken_at = T0 + 600 * S
    assert all_ok(check(h))
    h.attempts = [
        *h.attempts[:-1],
        replace(
            h.attempts[-2],
            try_number=2,
            state="running",
            lease_token=170,
            start_date=T0 + 20 * S,
            end_date=None,
        ),
    ]
    assert kinds(check(h)) == {}


def test_executions_are_loaded_from_worker_records_with_tokens_from_the_db(
    tmp_path: Path,
) -> None:
    t0 = T0.timestamp()
    rid = run(2).run_id

    def line(event: str, pid: int, t: float, tried: int = 1, **extra: object) -> str:
        rec = {
            "event": event,
            "dag_id": "every_5s",
            "run_id": rid,
            "task_id": "work",
            "try": tried,
            "pid": pid,
            "worker": "w1",
            "t": t0 + t,
            **extra,
        }
        return json.dumps(rec)

    (tmp_path / "w1.jsonl").write_text(
        "\n".join(
            [
                line("start", 10, 11.0),
                line("gone", 10, 40.05),
                line("end", 10, 40.0, rc=1),
                line("start", 11, 42.0, tried=2),  # killed: only the watcher saw it go
                line("gone", 11, 43.5, tried=2),
                line("start", 12, 50.0, tried=3),  # still running
                '{"event": "end", "pid": 1',  # torn by a kill -9
            ]
        )
    )
    found = load_executions([tmp_path / "w1.jsonl", tmp_path / "missing.jsonl"])
    assert [(e.pid, e.try_number, e.exit_code) for e in found] == [
        (10, 1, 1),
        (11, 2, None),
        (12, 3, None),
    ]
    assert found[0].ended_at == T0 + 40 * S
    assert found[1].ended_at == T0 + 43.5 * S
    assert found[2].ended_at is None
    tokened = with_tokens(found, clean().attempts)
    assert [e.token for e in tokened] == [120, 150, None]


def test_a_pid_the_kernel_reused_is_two_executions(tmp_path: Path) -> None:
    """pid_max wraps within minutes on a busy worker: one (worker, pid) ran two attempts.
    Both are executions, each with its own end (the soak once reported the first one as a
    PHANTOM_SUCCESS: it had been overwritten by the second)."""
    base = {"dag_id": "every_5s", "task_id": "work", "worker": "w1", "pid": 10}
    first, second = run(1).run_id, run(2).run_id
    t0 = T0.timestamp()
    lines = [
        {**base, "run_id": first, "try": 1, "event": "start", "t": t0 + 1.0},
        {**base, "run_id": first, "try": 1, "event": "end", "rc": 0, "t": t0 + 2.0},
        {**base, "run_id": second, "try": 1, "event": "start", "t": t0 + 600.0},
        {**base, "run_id": second, "try": 1, "event": "gone", "t": t0 + 601.0},
        {**base, "run_id": second, "try": 1, "event": "end", "rc": 0, "t": t0 + 600.5},
    ]
    log = tmp_path / "w1.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in lines))
    found = load_executions([log])
    assert [(e.run_id, e.started_at, e.ended_at, e.exit_code) for e in found] == [
        (first, T0 + 1 * S, T0 + 2 * S, 0),
        (second, T0 + 600 * S, T0 + 600.5 * S, 0),
    ]


def test_diverging_digests_are_found() -> None:
    h = clean()
    h.statuses = statuses(digest_b="d2")
    assert kinds(check(h)) == {"replicas_agree": {"DIVERGED"}}
    h = clean()
    h.digest_samples = [*h.digest_samples, DigestSample("c", 300, "y")]
    assert kinds(check(h)) == {"replicas_agree": {"DIVERGED"}}


def test_lost_outbox_entry_is_found() -> None:
    h = clean()
    h.db_watermark = 39  # entry 40 committed (and acked) but never written
    h.statuses = statuses(seen=39)
    assert kinds(check(h)) == {"nothing_committed_lost": {"UNMATERIALIZED", "ACKED_NOT_IN_DB"}}
    h = clean()
    h.db_watermark = 38
    h.statuses = statuses(acked=38, seen=38)
    assert kinds(check(h)) == {"nothing_committed_lost": {"UNMATERIALIZED"}}


def test_db_that_lost_a_write_or_runs_missing_from_db_are_found() -> None:
    h = clean()
    h.db_watermark = 41
    assert kinds(check(h)) == {"nothing_committed_lost": {"WATERMARK_AHEAD"}}
    h = clean()
    h.leader_runs = frozenset({("every_5s", run(1).run_id), ("every_5s", "ghost")})
    assert kinds(check(h)) == {"nothing_committed_lost": {"RUN_MISSING"}}
    h = clean()
    h.runs = [r for r in h.runs if r.run_id != run(1).run_id]
    assert kinds(check(h)) == {
        "one_run_per_slot": {"GAP"},
        "nothing_committed_lost": {"ORPHAN_ATTEMPT"},
    }


def test_no_node_answering_fails_invariant_four() -> None:
    h = clean()
    h.statuses = [NodeStatus("a", reachable=False)]
    assert "NO_STATUS" in kinds(check(h))["nothing_committed_lost"]


def test_report_carries_verdicts_and_exit_code(tmp_path: Path) -> None:
    h = clean()
    h.db_watermark = 39
    verdicts = check(h)
    data = report.build(
        verdicts,
        seed=7,
        profile="short",
        timeline=[{"t": 0.0, "nemesis": "kill", "action": "start"}],
        leader_changes=[{"t": 1.0, "leader": "a", "term": 3}],
        counts={"runs": len(h.runs), "attempts": len(h.attempts)},
    )
    path = tmp_path / "r.json"
    report.write(data, path)
    assert report.exit_code(data) == 1
    assert data["verdict"] == "FAIL"
    assert data["violations"][0]["invariant"] == "nothing_committed_lost"
    assert path.read_text().startswith("{")
    assert report.exit_code(report.build(check(clean()), seed=1, profile="short")) == 0


@pytest.mark.parametrize("profile", ["short", "long"])
def test_same_seed_gives_the_same_schedule(profile: str) -> None:
    one = schedule.make_schedule(seed=42, duration=120, profile=profile)
    two = schedule.make_schedule(seed=42, duration=120, profile=profile)
    other = schedule.make_schedule(seed=43, duration=120, profile=profile)
    assert one == two
    assert one != other
    assert one and one[-1].heal_at <= 120
    assert all(s.heal_at > s.at and s.settle > 0 for s in one)
    assert all(b.at >= a.heal_at + a.settle - 1e-6 for a, b in itertools.pairwise(one))
    assert {s.nemesis for s in one} <= set(schedule.NEMESES)


class FakeNetwork:
    def __init__(self) -> None:
        self.blocked: dict[int, set[str]] = {}

    def block(self, i: int, peers: list[str]) -> None:
        self.blocked.setdefault(i, set()).update(peers)

    def drop_randomly(self, i: int, peer: str, probability: float) -> None:
        self.blocked.setdefault(i, set()).add(f"{peer}~{probability}")

    def heal(self, i: int) -> None:
        self.blocked.pop(i, None)

    def netem_available(self) -> str | None:
        return "no netem"

    def delay(self, i: int, delay_ms: int) -> None:
        raise AssertionError("unavailable")

    def clear_delay(self, i: int) -> None:
        raise AssertionError("unavailable")


class FakeCluster:
    def __init__(self, n: int = 5, leader: int | None = 3) -> None:
        self.network = FakeNetwork()
        self.names = [f"n{i}" for i in range(n)]
        self._leader = leader
        self.calls: list[tuple[str, int]] = []

    def address(self, i: int) -> str:
        return f"10.0.0.{i}"

    def namespace(self, i: int) -> str:
        return f"ns{i}"

    def pid(self, i: int) -> int | None:
        return 100 + i

    def leader(self) -> int | None:
        return self._leader

    def kill(self, i: int) -> None:
        self.calls.append(("kill", i))

    def restart(self, i: int) -> None:
        self.calls.append(("restart", i))

    def stop_signal(self, i: int) -> None:
        self.calls.append(("stop", i))

    def cont(self, i: int) -> None:
        self.calls.append(("cont", i))

    def db_unavailable_reason(self) -> str | None:
        return None

    def db_stop(self) -> None:
        self.calls.append(("db_stop", -1))

    def db_start(self) -> None:
        self.calls.append(("db_start", -1))


def test_split_puts_the_leader_in_the_minority_and_bridge_keeps_one_in_both() -> None:
    cluster = FakeCluster()
    split = nemesis.make("split", {"shuffle": 5})
    details = split.start(cluster)
    assert len(details["side_a"]) == 2 and "n3" in details["side_a"]
    assert len(details["side_b"]) == 3
    for i in (int(n[1:]) for n in details["side_a"]):
        assert cluster.network.blocked[i] == {
            cluster.address(int(n[1:])) for n in details["side_b"]
        }
    split.stop(cluster)
    assert cluster.network.blocked == {}

    bridge = nemesis.make("bridge", {"shuffle": 9})
    details = bridge.start(cluster)
    assert len(details["sees_both"]) == 1
    middle = details["sees_both"][0]
    assert middle not in details["side_a"] + details["side_b"]
    assert all(cluster.address(int(middle[1:])) not in b for b in cluster.network.blocked.values())


def test_leader_nemeses_skip_without_a_leader_and_the_rest_heal() -> None:
    cluster = FakeCluster(3, leader=None)
    timeline = nemesis.Timeline()
    steps = [
        schedule.Step(0.0, 0.0, 0.0, "isolate-leader"),
        schedule.Step(0.0, 0.0, 0.0, "pause-leader"),
        schedule.Step(0.0, 0.0, 0.0, "kill", {"node": 4}),
        schedule.Step(0.0, 0.0, 0.0, "delay", {"link": [0, 1]}),
        schedule.Step(0.0, 0.0, 0.0, "db-restart"),
    ]
    nemesis.execute(steps, cluster, timeline)
    actions = [(e["nemesis"], e["action"]) for e in timeline.events]
    assert actions == [
        ("isolate-leader", "skip"),
        ("pause-leader", "skip"),
        ("kill", "start"),
        ("kill", "stop"),
        ("delay", "skip"),
        ("db-restart", "start"),
        ("db-restart", "stop"),
    ]
    assert ("kill", 1) in cluster.calls and ("restart", 1) in cluster.calls
    assert cluster.calls[-1] == ("db_start", -1)  # heal_everything ends with the DB


class FakeWorkers:
    count = 2

    def __init__(self) -> None:
        self.pids = {0: 500, 1: 501}

    def kill(self, i: int) -> None:
        self.pids[i] = None

    def restart(self, i: int) -> None:
        self.pids[i] = 600 + i


class WorkerCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__(3, leader=0)
        self.workers = FakeWorkers()

    def workers_unavailable_reason(self) -> str | None:
        return None

    def kill_worker(self, i: int) -> None:
        self.workers.kill(i)

    def restart_worker(self, i: int) -> None:
        self.workers.restart(i)

    def worker_pid(self, i: int) -> int | None:
        return self.workers.pids[i]


def test_kill_worker_kills_and_restarts_a_worker_and_needs_workers() -> None:
    assert nemesis.make("kill-worker").unavailable(FakeCluster()) == "the cluster has no workers"
    cluster = WorkerCluster()
    timeline = nemesis.Timeline()
    steps = [
        schedule.Step(0.0, 0.0, 0.0, "kill-worker", {"worker": 3}),
        schedule.Step(0.0, 0.0, 0.0, "kill-worker", {"worker": 3}),
    ]
    nemesis.execute(steps, cluster, timeline)
    events = [(e["action"], e["details"]) for e in timeline.events]
    assert events[0] == ("start", {"planned_heal_at": 0.0, "worker": 1, "pid": 501})
    assert events[1] == ("stop", {"worker": 1, "pid": 601})
    assert events[2][1]["pid"] == 601
    assert cluster.workers.pids == {0: 500, 1: 601}


def test_task_script_records_normal_and_killed_executions(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    from scripts.partition.workload import TASK_SCRIPT

    script = tmp_path / "pt_task.sh"
    script.write_text(TASK_SCRIPT)
    log = tmp_path / "w.jsonl"
    env = {
        **os.environ,
        "PT_EXEC_LOG": str(log),
        "PT_WORKER": "w",
        "RAFTSCHED_DAG_ID": "d",
        "RAFTSCHED_RUN_ID": "r",
        "RAFTSCHED_TASK_ID": "t",
        "RAFTSCHED_TRY_NUMBER": "1",
        "RAFTSCHED_LOGICAL_DATE": "2024-05-01T12:00:03+00:00",
    }

    def attempt(max_seconds: int, fail_until: int) -> subprocess.Popen[bytes]:
        # as the worker runs it: bash -c, its own session, output on pipes
        return subprocess.Popen(
            ["bash", "-c", f"exec bash {script} {max_seconds} {fail_until}"],
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    assert attempt(0, 0).wait(timeout=20) == 0
    assert attempt(0, 1).wait(timeout=20) == 1  # try 1 <= fail_until
    victim = attempt(3, 0)
    deadline = time.monotonic() + 10
    while log.read_text().count('"start"') < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(victim.pid, signal.SIGKILL)
    killed_at = datetime.now(UTC)
    victim.communicate(timeout=10)  # the watcher holds none of the attempt's pipes
    while log.read_text().count('"gone"') < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    found = load_executions([log])
    assert [(e.exit_code, e.try_number) for e in found] == [(0, 1), (1, 1), (None, 1)]
    assert all(e.ended_at is not None for e in found)
    assert abs(found[2].ended_at - killed_at) < timedelta(seconds=1)


def test_workload_dag_files_parse(tmp_path: Path) -> None:
    from raftsched.dags.parser import parse_folder
    from scripts.partition.workload import dag_files

    for name, source in dag_files(T0, T0 + 60 * S, tmp_path / "pt_task.sh").items():
        (tmp_path / name).write_text(source)
    parsed = parse_folder(tmp_path, timeout=60, output_limit=10_000)
    assert not parsed.errors, parsed.errors
    tasks = {spec.dag_id: sorted(t.task_id for t in spec.tasks) for spec in parsed.specs}
    assert tasks == {
        "pt_every_second": ["quick", "work"],
        "pt_every_2s": ["after", "flaky"],
        "pt_every_5s": ["doomed", "wide_a", "wide_b"],
    }
    assert all(spec.catchup and spec.end_date == T0 + 60 * S for spec in parsed.specs)


def test_an_attempt_of_a_killed_worker_ends_with_its_guard(tmp_path: Path) -> None:
    from scripts.partition.history import GUARD_TEARDOWN, load_executions

    log = tmp_path / "pt-w0-g0.jsonl"
    base = {"dag_id": "d", "run_id": "r", "task_id": "t", "try": 1, "worker": "pt-w0-g0"}
    lines = [
        {**base, "pid": 10, "event": "start", "t": 100.0},  # no end, no gone: killed with it
        {**base, "pid": 11, "event": "start", "t": 100.0},
        {**base, "pid": 11, "event": "end", "rc": 0, "t": 150.0},  # outlived it: kept as seen
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ends = {e.pid: e.ended_at for e in load_executions([log], {"pt-w0-g0": 101.0})}
    assert ends[10] is not None and ends[10].timestamp() == 101.0 + GUARD_TEARDOWN
    assert ends[11] is not None and ends[11].timestamp() == 150.0
    unknown = {e.pid: e.ended_at for e in load_executions([log])}
    assert unknown[10] is None


# -- the poison nemesis (issue #9) -------------------------------------------------------------


@pytest.mark.parametrize("profile", ["short", "long"])
def test_poison_wraps_every_nth_fault_and_leaves_a_seeds_faults_as_they_were(profile: str) -> None:
    every = schedule.PROFILES[profile].poison_every
    for seed in (1, 2, 42, 2026):
        steps = schedule.make_schedule(seed=seed, duration=900, profile=profile)
        plain = schedule.unwrapped(steps)
        assert "poison" not in {s.nemesis for s in plain}
        assert schedule.with_poison(plain, every) == steps
        wrappable = [s for s in plain if s.nemesis in schedule.POISON_WRAPS]
        poisoned = [s for s in steps if s.nemesis == "poison"]
        assert len(poisoned) == -(-len(wrappable) // every)  # the 1st, the (every+1)th, ...
        for step in poisoned:
            assert step.params["under"] in schedule.POISON_WRAPS
        assert [(s.at, s.heal_at, s.settle) for s in steps] == [
            (s.at, s.heal_at, s.settle) for s in plain
        ]
    # the CI run's faults (seed 1, 90 s) are the ones it had before poison existed (and its
    # plain kill-worker now kills a triggerer: same time, same target index)
    ci = schedule.make_schedule(seed=1, duration=90, profile="short")
    assert [s.nemesis for s in schedule.unwrapped(ci)] == [
        "split",
        "split",
        "db-restart",
        "kill-worker",
        "delay",
        "isolate-leader",
        "kill-triggerer",
        "db-restart",
    ]
    assert [s.params.get("under") for s in ci if s.nemesis == "poison"] == [
        "split",
        "kill-worker",
        "db-restart",
    ]


class FakeApi:
    """A RaftschedClient stand-in: each method answers from ``answers`` by method name (an
    exception to raise, or a value), TriggerDag of the poison run OK."""

    def __init__(self, answers: dict[str, object], calls: list[tuple[str, str]], server: str):
        self.answers = answers
        self.calls = calls
        self.server = server

    def __getattr__(self, service: str) -> object:
        api = self

        class Service:
            def __getattr__(self, method: str) -> object:
                def call(request: object, **_: object) -> object:
                    api.calls.append((api.server, method))
                    if method == "TriggerDag" and request.run_id.startswith("poison__"):
                        return object()
                    answer = api.answers.get(method, api.answers.get("*"))
                    if isinstance(answer, BaseException):
                        raise answer
                    return answer

                return call

        return Service()

    def close(self) -> None:
        pass


class PoisonCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__(3, leader=0)
        self.api_addresses = ["10.0.0.0:7301", "10.0.0.1:7301", "10.0.0.2:7301"]


def test_poison_holds_its_fault_and_classifies_every_hostile_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    import grpc

    from raftsched.errors import ApiError

    def refused(code: grpc.StatusCode, message: str = "conf_json is nested too deep") -> ApiError:
        return ApiError(code, message)

    by_server: dict[str, dict[str, object]] = {
        # node 0 answers well, except an INTERNAL, an accepted call and a two-line message
        "10.0.0.0:7301": {
            "*": refused(grpc.StatusCode.INVALID_ARGUMENT),
            "ListDags": refused(grpc.StatusCode.INTERNAL, "internal error"),
            "ListTaskInstances": object(),
            "Heartbeat": refused(grpc.StatusCode.INVALID_ARGUMENT, "two\nlines"),
        },
        "10.0.0.1:7301": {"*": refused(grpc.StatusCode.NOT_FOUND, "run not found")},
        # node 2 is cut off: two calls go unanswered, the rest are not sent
        "10.0.0.2:7301": {"*": refused(grpc.StatusCode.UNAVAILABLE, "no quorum")},
    }
    calls: list[tuple[str, str]] = []

    def factory(servers: list[str], **_: object) -> FakeApi:
        return FakeApi(by_server.get(servers[0], {}), calls, servers[0])

    monkeypatch.setattr(nemesis.Poison, "client_factory", staticmethod(factory))
    cluster = PoisonCluster()
    assert nemesis.make("poison").unavailable(FakeCluster()) is not None
    assert nemesis.make("poison").unavailable(cluster) is None
    timeline = nemesis.Timeline()
    step = schedule.Step(
        0.0, 0.0, 0.0, "poison", {"under": "split", "under_params": {"shuffle": 5}}
    )
    nemesis.execute([step], cluster, timeline)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        e["action"] == "triggered" for e in timeline.events
    ):
        time.sleep(0.01)

    actions = {e["action"]: e for e in timeline.events}  # "triggered" may come at any time
    assert sorted(actions) == ["start", "stop", "triggered"]
    start, stop = actions["start"], actions["stop"]
    assert start["details"]["under"] == "split" and "n0" in start["details"]["side_a"]
    assert cluster.network.blocked == {}  # the split was healed
    details = stop["details"]
    hostile = len(nemesis.hostile_calls("d", "t"))
    assert len(details["calls"]) == 3 * hostile
    by_node = {
        node: [c["outcome"] for c in details["calls"] if c["node"] == node]
        for node in ("n0", "n1", "n2")
    }
    assert by_node["n1"] == ["refused"] * hostile
    assert by_node["n2"] == ["unavailable"] * 2 + ["skipped"] * (hostile - 2)
    bad = {(c["method"], c["code"]) for c in details["calls"] if c["outcome"] == "bad"}
    assert bad == {
        ("ListDags", "INTERNAL"),
        ("ListTaskInstances", "OK"),
        ("Heartbeat", "INVALID_ARGUMENT"),
    }
    assert details["bad"] == 3 and details["all_refused"] is False
    assert ("triggered", "pt_poison") in [
        (e["action"], e["details"].get("dag_id")) for e in timeline.events
    ]

    verdict = nemesis.check_hostile_refusals(timeline.events)
    assert not verdict.ok and verdict.checked == 3 * hostile
    assert {v.kind for v in verdict.violations} == {"NOT_REFUSED"} and len(verdict.violations) == 3
    assert "1 poison runs created" in verdict.notes[0]
    assert verdict.to_dict()["verdict"] == "FAIL"
    clean = [e for e in timeline.events if e["action"] != "stop"]
    assert nemesis.check_hostile_refusals(clean).ok


def test_poison_task_prints_nul_and_invalid_utf8_and_its_dag_parses(tmp_path: Path) -> None:
    import os
    import subprocess

    from raftsched.dags.parser import parse_folder
    from scripts.partition.workload import POISON_DAG, TASK_SCRIPT, poison_dag_file

    script = tmp_path / "pt_task.sh"
    script.write_text(TASK_SCRIPT)
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "pt_poison.py").write_text(poison_dag_file(script))
    parsed = parse_folder(folder, timeout=60, output_limit=10_000)
    assert not parsed.errors, parsed.errors
    [spec] = parsed.specs
    assert spec.dag_id == POISON_DAG and spec.schedule.kind is ScheduleKind.NONE
    env = {
        **os.environ,
        "PT_EXEC_LOG": str(tmp_path / "w.jsonl"),
        "RAFTSCHED_DAG_ID": POISON_DAG,
        "RAFTSCHED_RUN_ID": "r",
        "RAFTSCHED_TASK_ID": "hostile_output",
        "RAFTSCHED_TRY_NUMBER": "1",
        "RAFTSCHED_LOGICAL_DATE": "2024-05-01T12:00:03+00:00",
    }
    done = subprocess.run(
        ["bash", str(script), "0", "0", "poison"], env=env, capture_output=True, timeout=30
    )
    assert done.returncode == 0
    assert b"a\x00b x\xff\xfey" in done.stdout and b"e\x00f \xff" in done.stderr
    assert [e.task_id for e in load_executions([tmp_path / "w.jsonl"])] == ["hostile_output"]


# -- power-loss and clock-skew (issue #10 part 6) ------------------------------------------------


def test_long_profile_draws_power_loss_and_clock_skew_and_short_leaves_ci_as_it_was() -> None:
    from scripts.partition.faults import SKEW_SECONDS

    long = schedule.unwrapped(schedule.make_schedule(seed=2026, duration=1800, profile="long"))
    drawn = [s.nemesis for s in long]
    assert "power-loss" in drawn and "clock-skew" in drawn
    for step in long:
        if step.nemesis == "clock-skew":
            assert step.params["node"] in range(3)
            assert SKEW_SECONDS[0] <= abs(step.params["offset"]) <= SKEW_SECONDS[1]
            assert isinstance(step.params["leader"], bool)
    assert schedule.make_schedule(seed=2026, duration=1800, profile="long") == (
        schedule.make_schedule(seed=2026, duration=1800, profile="long")
    )
    for seed in (1, 2, 42, 2026):  # weight 0 in short: never drawn there
        short = schedule.make_schedule(seed=seed, duration=900, profile="short")
        assert not {"power-loss", "clock-skew"} & {s.nemesis for s in schedule.unwrapped(short)}
    assert {"power-loss", "clock-skew"} <= set(nemesis.KINDS) <= set(schedule.NEMESES)


def test_skew_bound_stays_well_inside_the_workers_fence_margin() -> None:
    from raftsched.config import fence_margin
    from scripts.partition import workload
    from scripts.partition.faults import SKEW_SECONDS

    assert SKEW_SECONDS[1] <= fence_margin(workload.LEASE_TTL) - 0.5


class FaultCluster(FakeCluster):
    def __init__(self, workdir: Path, n: int = 3, leader: int | None = 1) -> None:
        super().__init__(n, leader)
        self.workdir = workdir
        self.names = [f"10.0.0.{i}:7101" for i in range(n)]


def test_power_loss_kills_every_node_cuts_each_journal_to_its_fsync_and_restarts_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scripts.partition import faults

    killed: list[int] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: killed.append(pid))
    cluster = FaultCluster(tmp_path)
    sizes = {0: (100, 60), 1: (80, 80), 2: (50, None)}  # (written, fsynced)
    for i, (size, synced) in sizes.items():
        d = faults.node_dir(faults.data_dir(tmp_path), cluster.names[i])
        d.mkdir(parents=True)
        (d / "raft.journal").write_bytes(b"x" * size)
        if synced is not None:
            (d / "raft.journal.synced").write_text(f"{synced}\n")
    fault = nemesis.make("power-loss")
    assert fault.unavailable(cluster) is None
    details = fault.start(cluster)
    assert killed == [100, 101, 102]  # every SIGKILL before any reap
    assert cluster.calls == [("kill", 0), ("kill", 1), ("kill", 2)]
    assert details["leader"] == cluster.names[1] and details["bytes_cut"] == 40
    assert details["aimed_at_unsynced_tail"] is True  # node 0 had 40 bytes unsynced
    lengths = {
        i: (faults.node_dir(faults.data_dir(tmp_path), n) / "raft.journal").stat().st_size
        for i, n in enumerate(cluster.names)
    }
    assert lengths == {0: 60, 1: 80, 2: 50}  # no record: left whole, and said so
    assert [j["synced"] for j in details["journals"]] == [60, 80, None]
    fault.stop(cluster)
    assert cluster.calls[3:] == [("restart", 0), ("restart", 1), ("restart", 2)]
    # every journal synced: the cut waits for a tail at most ``aim`` seconds, then cuts nothing
    assert faults.unsynced_bytes(faults.data_dir(tmp_path)) == 0
    again = nemesis.make("power-loss", {"aim": 0.05}).start(cluster)
    assert again["aimed_at_unsynced_tail"] is False and again["bytes_cut"] == 0


def test_clock_skew_writes_one_nodes_offset_and_heals_to_zero(tmp_path: Path) -> None:
    from raftsched.clock import OFFSET_FILE_ENV, _read_offset
    from scripts.partition import faults

    cluster = FaultCluster(tmp_path, leader=2)
    env = faults.node_env({"A": "1"}, tmp_path, cluster.names[2])
    path = Path(env[OFFSET_FILE_ENV])
    assert env["A"] == "1" and env["RAFTSCHED_TEST_JOURNAL_SYNCED"] == "1"
    fault = nemesis.make("clock-skew", {"node": 0, "offset": -1.2, "leader": True})
    details = fault.start(cluster)
    assert details == {"node": cluster.names[2], "was_leader": True, "clock_offset": -1.2}
    assert _read_offset(str(path)) == -1.2
    fault.stop(cluster)
    assert _read_offset(str(path)) == 0.0
    far = nemesis.make("clock-skew", {"node": 4, "offset": 9.0})  # clamped to the bound
    assert far.start(FaultCluster(tmp_path, leader=None))["clock_offset"] == 1.25
    assert far.path == faults.offset_file(tmp_path, cluster.names[1])


def test_max_skew_reads_every_applied_offset_also_under_poison() -> None:
    from scripts.partition.faults import max_skew

    timeline = nemesis.Timeline()
    assert max_skew(timeline.events) == 0.0
    timeline.log("clock-skew", "start", node="a", clock_offset=0.7)
    timeline.log("poison", "start", under="clock-skew", node="b", clock_offset=-1.1)
    timeline.log("clock-skew", "stop", node="a", clock_offset_now=0.0)
    assert max_skew(timeline.events) == 1.1


def test_skew_widens_only_the_lease_stamp_comparison_and_a_larger_violation_is_caught() -> None:
    h = clean()
    early = replace(h.executions[0], started_at=T0 + 5 * S)  # leased at 6 s: 1 s early
    h.executions = [early, *h.executions[1:]]
    assert kinds(check(h)) == {"dispatch_only_after_commit": {"EXECUTED_BEFORE_LEASE"}}
    assert kinds(check(h, skew=timedelta(seconds=1.2))) == {}  # within a 1.2 s skew
    h.executions = [replace(early, started_at=T0 + 4 * S), *h.executions[1:]]  # 2 s early
    assert kinds(check(h, skew=timedelta(seconds=1.2))) == {
        "dispatch_only_after_commit": {"EXECUTED_BEFORE_LEASE"}
    }
    # worker against worker: an overlap of executions is not excused by a node's skew
    h = clean()
    late = replace(h.executions[1], ended_at=T0 + 43 * S)  # token 120 ran past 150's start
    h.executions = [h.executions[0], late, h.executions[2]]
    assert kinds(check(h, skew=timedelta(seconds=1.25))) == {
        "one_holder_per_attempt": {"DOUBLE_EXECUTION"}
    }
    # stamp against stamp: a re-lease before the old lease ended is not excused either
    h = clean()
    h.attempts = [*h.attempts[:2], replace(h.attempts[2], start_date=T0 + 40 * S)]
    h.executions, h.expect_executions = [], False
    found = kinds(check(h, skew=timedelta(seconds=1.25)))
    assert "DOUBLE_HOLDER" in found["one_holder_per_attempt"]


def test_an_attempt_started_as_its_worker_was_killed_ends_with_the_kill(tmp_path: Path) -> None:
    from scripts.partition.history import GUARD_TEARDOWN, load_executions

    kill = 1000.0
    lines = [
        {"event": "start", "dag_id": "d", "run_id": "r", "task_id": "t", "try": 1,
         "pid": pid, "worker": "w1-g0", "t": t}
        for pid, t in ((10, kill - 5), (11, kill + 0.025))
    ]  # fmt: skip
    path = tmp_path / "w1.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    before, after = sorted(load_executions([path], {"w1-g0": kill}), key=lambda e: e.pid)
    assert before.ended_at == datetime.fromtimestamp(kill + GUARD_TEARDOWN, UTC)
    assert after.ended_at == datetime.fromtimestamp(kill + 0.025 + GUARD_TEARDOWN, UTC)
    assert load_executions([path])[0].ended_at is None  # no kill known: still running


# -- triggerers and invariant 8 -----------------------------------------------------------------


@pytest.mark.parametrize("profile", ["short", "long"])
def test_every_other_plain_worker_kill_kills_a_triggerer_at_the_same_time(profile: str) -> None:
    every = schedule.PROFILES[profile].triggerer_every
    for seed in (1, 2, 42, 2026):
        steps = schedule.make_schedule(seed=seed, duration=900, profile=profile)
        before = schedule.with_poison(
            schedule._faults(seed, 900, profile, 3), schedule.PROFILES[profile].poison_every
        )
        assert [(s.at, s.heal_at, s.settle) for s in steps] == [
            (s.at, s.heal_at, s.settle) for s in before
        ]
        kills = [b for b in before if b.nemesis == "kill-worker"]
        turned = [s for s, b in zip(steps, before, strict=True) if s != b]
        assert len(turned) == -(-len(kills) // every)
        for step in turned:
            assert step.nemesis == "kill-triggerer" and step.params["triggerer"] in (0, 1)
    assert "kill-triggerer" in nemesis.KINDS
    assert nemesis.make("kill-triggerer").unavailable(FakeCluster()) == (
        "the cluster has no triggerers"
    )


def _row(task: str, n: int, state: str, message: str = "", run: str = "r1") -> AttemptRow:
    return AttemptRow("pt_deferred", run, task, n, state, "w", n, T0, T0, T0, message)


def _resume(task: str, n: int, fired: str = "2024-01-01T00:00:03+00:00", run: str = "r1"):
    return {
        "event": "resume",
        "dag_id": "pt_deferred",
        "run_id": run,
        "task_id": task,
        "try": n,
        "due": "2024-01-01T00:00:03+00:00",
        "fired": fired,
        "worker": "pt-w0-g0",
        "t": 1.0,
    }


def test_firings_consumed_once_passes_a_clean_history_and_names_each_breach(
    tmp_path: Path,
) -> None:
    from scripts.partition import triggers as pt

    log = tmp_path / "pt-w0-g0.jsonl"
    records = [_resume("a", 2), {"event": "start", "pid": 1}, _resume("b", 2, "bad")]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    resumes = pt.load_resumes([log])
    assert [(r["key"][2], r["try"]) for r in resumes] == [("a", 2), ("b", 2)]
    fired = "deferred on a time trigger; it fired"
    runs = [RunRow("pt_deferred", "r1", T0, state="success")]
    clean = pt.check_firings_consumed_once(
        [_row("a", 1, "deferred", fired), _row("a", 2, "success")], runs, [], resumes[:1]
    )
    assert clean.ok and clean.checked == 2, clean.violations
    ran = [
        Execution("pt_deferred", "r1", "c", 3, "w", T0, T0, try_number=2),
    ]
    broken = pt.check_firings_consumed_once(
        [
            _row("a", 1, "deferred", fired),
            _row("a", 2, "success"),
            _row("b", 2, "success"),  # resumed with no firing of try 1
            _row("c", 1, "deferred", fired),
            _row("c", 2, "success"),  # ran without its event
            _row("d", 1, "deferred", fired),  # fired, run finished, never resumed
        ],
        runs,
        ran,
        [*resumes, _resume("a", 2)],  # a's firing resumed twice; b's event not its own
    )
    kinds = sorted(v.kind for v in broken.violations)
    assert kinds == [
        "DOUBLE_RESUME",
        "FIRING_LOST",
        "NOT_RESUMED",
        "RESUMED_WITHOUT_FIRING",
        "WRONG_EVENT",
    ], broken.violations
