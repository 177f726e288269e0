"""Invariant 9 of the partition checker (scripts/partition/assets.py) over hand-built
histories: a clean one passes, and each way of consuming an event other than exactly once is
named; the workload's DAG files parse; the poster sends one client event id again after an
error, and once more after an answer."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec
from scripts.partition import assets as pa
from scripts.partition.assets import AssetHistory, CarryRow, EventRow, PostRecord
from scripts.partition.history import AttemptRow, RunRow

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
A, B, C = pa.ASSET_A, pa.ASSET_B, pa.ASSET_C
ALL = json.dumps({"all": [A, C]}, separators=(",", ":"))
ANY = json.dumps({"any": [B, C]}, separators=(",", ":"))


def dag(dag_id: str, condition: str = "", outlets: tuple[str, ...] = ()) -> DagSpec:
    task = TaskSpec(task_id="make" if outlets else "use", kind="bash", command="true")
    return DagSpec(
        dag_id=dag_id,
        fileloc=f"/dags/{dag_id}.py",
        schedule=Schedule(ScheduleKind.NONE),
        start_date=T0,
        tasks=(replace(task, outlets=outlets),),
        asset_condition=condition,
    )


DAGS = [
    dag(pa.PRODUCER, outlets=(A, B)),
    dag(pa.CONSUMER_ALL, ALL),
    dag(pa.CONSUMER_ANY, ANY),
]


def arun(dag_id: str, n: int) -> RunRow:
    return RunRow(dag_id, f"asset_triggered__{n}", T0 + timedelta(seconds=n), "asset_triggered")


def made(run: str, try_number: int = 1) -> tuple[str, str, str, int]:
    return (pa.PRODUCER, run, "make", try_number)


def clean() -> tuple[list[RunRow], list[AttemptRow], AssetHistory]:
    """Producer runs p1, p2 (its try 2) and p3 each make an A and a B event; events 3 and 4
    (C) come from outside with ids k1 (sent three times) and k2. The AssetAny runs on every
    B or C; the AssetAll on A + C (events 1 + 3, then 4 + 5); p3's A (7) waits for a C."""
    runs = [
        RunRow(pa.PRODUCER, "p1", T0, "scheduled", "success"),
        RunRow(pa.PRODUCER, "p2", T0, "scheduled", "success"),
        RunRow(pa.PRODUCER, "p3", T0, "scheduled", "success"),
        *(arun(pa.CONSUMER_ANY, n) for n in (2, 3, 4, 6, 8)),
        *(arun(pa.CONSUMER_ALL, n) for n in (3, 5)),
    ]
    attempts = [
        AttemptRow(pa.PRODUCER, "p1", "make", 1, "success", lease_token=10),
        AttemptRow(pa.PRODUCER, "p2", "make", 1, "failed", lease_token=11),
        AttemptRow(pa.PRODUCER, "p2", "make", 2, "success", lease_token=12),
        AttemptRow(pa.PRODUCER, "p3", "make", 1, "success", lease_token=13),
    ]
    events = [
        EventRow(1, A, source=made("p1")),
        EventRow(2, B, source=made("p1")),
        EventRow(3, C, key="k1"),
        EventRow(4, C, key="k2"),
        EventRow(5, A, source=made("p2", 2)),
        EventRow(6, B, source=made("p2", 2)),
        EventRow(7, A, source=made("p3")),
        EventRow(8, B, source=made("p3")),
    ]
    carried = [
        *(CarryRow(n, pa.CONSUMER_ANY, f"asset_triggered__{n}") for n in (2, 3, 4, 6, 8)),
        *(CarryRow(n, pa.CONSUMER_ALL, "asset_triggered__3") for n in (1, 3)),
        *(CarryRow(n, pa.CONSUMER_ALL, "asset_triggered__5") for n in (4, 5)),
    ]
    posts = [
        PostRecord("k1", C, sends=3, errors=["UNAVAILABLE"], acked=True, event_id=3,
                   answers=[(3, False), (3, True)]),
        PostRecord("k2", C, sends=1, acked=True, event_id=4, answers=[(4, False)]),
    ]  # fmt: skip
    return runs, attempts, AssetHistory(events, carried, posts)


def check(runs: list[RunRow], attempts: list[AttemptRow], h: AssetHistory) -> Any:
    return pa.check_assets_consumed_once(DAGS, runs, attempts, h)


def kinds(verdict: Any) -> list[str]:
    return sorted(v.kind for v in verdict.violations)


def test_a_clean_history_passes_and_counts_what_it_checked() -> None:
    verdict = check(*clean())
    assert verdict.ok, verdict.violations
    # (event, consumer) pairs: ALL names A, C (events 1, 3, 4, 5, 7), ANY names B, C (2, 3,
    # 4, 6, 8); + 3 producer successes + 2 client ids
    assert verdict.checked == 10 + 3 + 2
    assert any("1 pending at the end" in n for n in verdict.notes), verdict.notes


def test_a_second_run_carrying_one_event_is_a_duplicate_consumer() -> None:
    runs, attempts, h = clean()
    runs.append(arun(pa.CONSUMER_ANY, 7))
    h.carried = [*h.carried, CarryRow(4, pa.CONSUMER_ANY, "asset_triggered__7")]
    verdict = check(runs, attempts, h)
    assert kinds(verdict) == ["DUPLICATE_CONSUMER"], verdict.violations
    assert verdict.violations[0].data["event_id"] == 4


def test_an_event_no_run_carried_is_missing_after_a_later_run_or_when_its_condition_holds() -> None:
    runs, attempts, h = clean()
    h.carried = [c for c in h.carried if (c.event_id, c.dag_id) != (2, pa.CONSUMER_ANY)]
    verdict = check(runs, attempts, h)  # run 3 of ANY came later: it had to carry event 2
    assert "MISSING_CONSUMER" in kinds(verdict), verdict.violations
    assert 2 in {v.data.get("event_id") for v in verdict.violations}

    runs, attempts, h = clean()  # the newest event, its run never made: C alone meets ANY
    runs.remove(arun(pa.CONSUMER_ANY, 8))
    h.carried = [c for c in h.carried if c.event_id != 8]
    verdict = check(runs, attempts, h)
    assert kinds(verdict) == ["MISSING_CONSUMER"], verdict.violations
    assert verdict.violations[0].data["event_ids"] == [8]


def test_pending_events_of_a_paused_consumer_or_an_unmet_condition_are_not_missing() -> None:
    runs, attempts, h = clean()
    runs.remove(arun(pa.CONSUMER_ANY, 8))
    h.carried = [c for c in h.carried if c.event_id != 8]
    verdict = pa.check_assets_consumed_once(DAGS, runs, attempts, h, paused={pa.CONSUMER_ANY})
    assert verdict.ok, verdict.violations


def test_an_event_the_bounded_queue_pushed_out_is_not_missing() -> None:
    events = [EventRow(i, B) for i in range(1, pa.MAX_EVENTS_KEPT + 2)]  # one more than kept
    last = events[-1].id
    carried = [CarryRow(e.id, pa.CONSUMER_ANY, "r") for e in events[1:]]
    runs = [RunRow(pa.CONSUMER_ANY, "r", T0, "asset_triggered")]
    verdict = check(runs, [], AssetHistory(events, carried))
    assert verdict.ok and verdict.checked == last, verdict.violations


def test_an_event_consumed_by_a_dag_whose_schedule_does_not_name_it_is_wrong_dag() -> None:
    runs, attempts, h = clean()
    h.carried = [*h.carried, CarryRow(2, pa.CONSUMER_ALL, "asset_triggered__3")]  # B: not ALL's
    verdict = check(runs, attempts, h)
    assert kinds(verdict) == ["WRONG_DAG"], verdict.violations
    runs, attempts, h = clean()
    h.carried = [*h.carried, CarryRow(3, pa.PRODUCER, "p1")]  # no asset schedule, no asset run
    assert kinds(check(runs, attempts, h)) == ["NO_RUN", "WRONG_DAG"]


def test_unknown_events_and_runs_whose_events_do_not_meet_their_condition_are_found() -> None:
    runs, attempts, h = clean()
    h.carried = [*h.carried, CarryRow(99, pa.CONSUMER_ANY, "asset_triggered__8")]
    assert kinds(check(runs, attempts, h)) == ["UNKNOWN_EVENT"]
    runs, attempts, h = clean()
    h.carried = [c for c in h.carried if (c.event_id, c.dag_id) != (3, pa.CONSUMER_ALL)]
    # ALL's run carried A only: unsatisfied; and event 3, before its later run, is missing
    assert kinds(check(runs, attempts, h)) == ["MISSING_CONSUMER", "UNSATISFIED_RUN"]


def test_producer_outlets_make_one_event_each_and_only_on_success() -> None:
    runs, attempts, h = clean()
    h.events = [e for e in h.events if e.id != 2]  # p1's B event never made
    h.carried = [c for c in h.carried if c.event_id != 2]
    runs.remove(arun(pa.CONSUMER_ANY, 2))
    assert kinds(check(runs, attempts, h)) == ["OUTLET_MISSING"]
    runs, attempts, h = clean()
    h.events = [*h.events, EventRow(9, A, source=made("p2", 1))]  # from the failed try
    assert kinds(check(runs, attempts, h)) == ["PHANTOM_EVENT"]
    runs, attempts, h = clean()
    h.events = [*h.events, EventRow(9, B, source=made("p1"))]  # p1 made B twice
    h.carried = [*h.carried, CarryRow(9, pa.CONSUMER_ANY, "asset_triggered__9")]
    runs.append(arun(pa.CONSUMER_ANY, 9))
    assert kinds(check(runs, attempts, h)) == ["OUTLET_DUPLICATE"]


def test_a_client_event_id_makes_one_event_and_an_answered_one_is_kept() -> None:
    runs, attempts, h = clean()
    h.events = [*h.events, EventRow(9, C, key="k1")]  # the retried send made a second event
    h.carried += [CarryRow(9, d, "asset_triggered__9") for d in (pa.CONSUMER_ANY, pa.CONSUMER_ALL)]
    runs += [arun(pa.CONSUMER_ANY, 9), arun(pa.CONSUMER_ALL, 9)]
    h.carried.append(CarryRow(7, pa.CONSUMER_ALL, "asset_triggered__9"))
    assert kinds(check(runs, attempts, h)) == ["DUPLICATE_EVENT"]
    runs, attempts, h = clean()
    h.posts = [*h.posts, PostRecord("k3", C, sends=1, acked=True, event_id=8, answers=[(8, False)])]
    h.posts[0].answers.append((5, True))
    assert kinds(check(runs, attempts, h)) == ["ACKED_EVENT_LOST", "ACK_MISMATCH"]


def test_nothing_consumed_is_vacuous() -> None:
    verdict = check([], [], AssetHistory([], []))
    assert kinds(verdict) == ["VACUOUS"]
    empty = AssetHistory([], [])
    assert pa.check_assets_consumed_once(DAGS, [], [], empty, require_events=False).ok


def test_asset_dag_files_parse_with_their_conditions_and_outlets(tmp_path: Path) -> None:
    from raftsched.dags.parser import parse_folder

    end = T0 + timedelta(seconds=60)
    for name, source in pa.dag_files(T0, end, tmp_path / "pt_task.sh").items():
        (tmp_path / name).write_text(source)
    parsed = parse_folder(tmp_path, timeout=60, output_limit=10_000)
    assert not parsed.errors, parsed.errors
    specs = {s.dag_id: s for s in parsed.specs}
    assert specs[pa.PRODUCER].tasks[0].outlets == (A, B)
    assert specs[pa.PRODUCER].catchup and specs[pa.PRODUCER].end_date == end
    assert specs[pa.CONSUMER_ALL].asset_condition == ALL
    assert specs[pa.CONSUMER_ANY].asset_condition == ANY


class FlakyAssets:
    """EmitAssetEvent that fails the first ``fail`` sends, then answers as the cluster does;
    ``commit_first``: the first failed send had committed its event (its answer was lost)."""

    def __init__(self, fail: int, commit_first: bool = False) -> None:
        self.fail, self.sent, self.ids = fail, [], {}
        self.commit_first = commit_first

    def EmitAssetEvent(self, request: Any) -> Any:
        from raftsched.api.gen import asset_pb2
        from raftsched.errors import NoQuorumError

        self.sent.append(request.event_id)
        if len(self.sent) <= self.fail:
            if self.commit_first and len(self.sent) == 1:
                self.ids.setdefault(request.event_id, len(self.ids) + 1)
            raise NoQuorumError("no node answered")
        duplicate = request.event_id in self.ids
        self.ids.setdefault(request.event_id, len(self.ids) + 1)
        return asset_pb2.EmitAssetEventResponse(id=self.ids[request.event_id], duplicate=duplicate)


@pytest.mark.parametrize("fail", [0, 2])
def test_the_poster_sends_an_id_again_after_an_error_and_once_more_after_an_answer(
    monkeypatch: pytest.MonkeyPatch, fail: int
) -> None:
    monkeypatch.setattr(pa, "RETRY_PAUSE", 0.0)
    poster = pa.Poster(["127.0.0.1:1"], "token", "run1")
    fake = FlakyAssets(fail)
    poster.client = type("C", (), {"assets": fake, "close": lambda self: None})()
    rec = PostRecord("pt-run1-1", C)
    poster._send_until_answered(rec, "{}")
    assert rec.acked and rec.event_id == 1 and rec.sends == fail + 1
    assert fake.sent == ["pt-run1-1"] * (fail + 1) and len(rec.errors) == fail
    assert poster._send(rec, "{}") and rec.answers[-1] == (1, True)


def test_a_send_whose_answer_was_lost_is_answered_duplicate_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pa, "RETRY_PAUSE", 0.0)
    poster = pa.Poster(["127.0.0.1:1"], "token", "run1")
    fake = FlakyAssets(1, commit_first=True)
    poster.client = type("C", (), {"assets": fake, "close": lambda self: None})()
    rec = PostRecord("pt-run1-3", C)
    assert not poster._send(rec, "{}", poster.client)  # the hasty send: committed, no answer
    poster._send_until_answered(rec, "{}")
    assert rec.acked and rec.answers == [(1, True)] and rec.sends == 2
    runs, attempts, h = clean()
    h.events = [*h.events, EventRow(9, C, key=rec.key)]
    h.carried += [CarryRow(9, d, "asset_triggered__9") for d in (pa.CONSUMER_ANY, pa.CONSUMER_ALL)]
    h.carried.append(CarryRow(7, pa.CONSUMER_ALL, "asset_triggered__9"))
    runs += [arun(pa.CONSUMER_ANY, 9), arun(pa.CONSUMER_ALL, 9)]
    rec.answers, rec.event_id = [(9, True)], 9
    h.posts = [*h.posts, rec]
    verdict = check(runs, attempts, h)
    assert verdict.ok, verdict.violations
    assert any(
        "2 ids sent again after an error (1 of them had committed)" in n for n in verdict.notes
    )


def test_a_consumer_attempt_given_other_events_than_its_run_carries_is_found(
    tmp_path: Path,
) -> None:
    import subprocess

    log = tmp_path / "pt-w0-g0.jsonl"
    env = {
        "PATH": "/usr/bin:/bin",
        "PT_EXEC_LOG": str(log),
        "PT_WORKER": "pt-w0-g0",
        "RAFTSCHED_DAG_ID": pa.CONSUMER_ALL,
        "RAFTSCHED_RUN_ID": "asset_triggered__5",
        "RAFTSCHED_TRY_NUMBER": "1",
        "RAFTSCHED_ASSET_EVENTS": json.dumps(
            [{"id": 5, "uri": A, "extra_json": '{"n": "x\\"}'}, {"id": 4, "uri": C}]
        ),
    }
    subprocess.run(["bash", "-c", pa.SEEN_RECORD], env=env, check=True, timeout=30)
    env.update(RAFTSCHED_RUN_ID="asset_triggered__3", RAFTSCHED_TRY_NUMBER="2")
    subprocess.run(["bash", "-c", pa.SEEN_RECORD], env=env, check=True, timeout=30)
    with log.open("a") as out:
        out.write('{"event":"start","pid":1}\n{"event":"consumed","dag_id":')  # torn
    seen = pa.load_seen([log, tmp_path / "missing.jsonl"])
    assert seen == [
        pa.Seen(pa.CONSUMER_ALL, "asset_triggered__5", 1, (4, 5)),
        pa.Seen(pa.CONSUMER_ALL, "asset_triggered__3", 2, (4, 5)),
    ]
    runs, attempts, h = clean()
    h.seen = seen[:1]
    assert check(runs, attempts, h).ok
    h.seen = seen  # run 3 carries events 1 and 3, its try 2 was given 4 and 5
    verdict = check(runs, attempts, h)
    assert kinds(verdict) == ["WRONG_EVENTS_SEEN"], verdict.violations
    assert verdict.violations[0].data["carried"] == [1, 3]
