"""Schedule policies on a real cluster, on SQLite and on PostgreSQL.

One :class:`webstack.WebStack` per backend, shared by the module (three scheduler nodes, a
worker, a webserver), with one DAG per policy. Each test reads what the cluster committed:
runs in the DB, and the DAG's skipped slots, policies and pause note through the REST API
and the CLI. The buffer_all test kills the leader while slots are buffered: the new leader
neither loses nor repeats one.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from harness import utcnow, wait_for, whole_second
from test_rest_api import _database
from webstack import WebStack

pytestmark = pytest.mark.slow

START = whole_second(utcnow()) - timedelta(hours=2)


def dag_source(dag_id: str, *, schedule: str, command: str = "true", **kw: Any) -> str:
    args = "".join(f"    {name}={value},\n" for name, value in kw.items())
    return (
        textwrap.dedent(
            f"""\
        from datetime import datetime, timedelta

        from raftsched import DAG, BashTask

        with DAG(
            {dag_id!r},
            schedule={schedule!r},
            start_date=datetime.fromisoformat({START.isoformat()!r}),
        """
        )
        + args
        + f"):\n    BashTask('work', command={command!r})\n"
    )


EVERY_2S = "* * * * * */2"
DAGS = {
    # a run takes ~5 s, a slot comes every 2 s: two or three slots overlap each run
    "pol_skip": dag_source(
        "pol_skip", schedule=EVERY_2S, command="sleep 5", catchup=False, overlap="'skip'"
    ),
    "pol_buffer_one": dag_source(
        "pol_buffer_one",
        schedule=EVERY_2S,
        command="sleep 5",
        catchup=False,
        overlap="'buffer_one'",
    ),
    # a run takes ~3 s, a slot comes every 2 s: the buffer grows while the test looks
    "pol_buffer_all": dag_source(
        "pol_buffer_all",
        schedule=EVERY_2S,
        command="sleep 3",
        catchup=False,
        overlap="'buffer_all'",
    ),
    # two hours of minute slots missed; only the last 5 minutes run
    "pol_window": dag_source(
        "pol_window",
        schedule="* * * * *",
        catchup=True,
        catchup_window="timedelta(minutes=5)",
    ),
    "pol_limited": dag_source("pol_limited", schedule="* * * * * *", catchup=False, max_runs=3),
    "pol_jitter": dag_source(
        "pol_jitter", schedule=EVERY_2S, catchup=False, jitter="timedelta(seconds=1)"
    ),
    "pol_fail": dag_source("pol_fail", schedule="@once", command="exit 3", pause_on_failure=True),
    "pol_manual": dag_source("pol_manual", schedule=None),
    "pol_ended": dag_source(
        "pol_ended",
        schedule="@hourly",
        catchup=True,
        end_date=f"datetime.fromisoformat({(START + timedelta(hours=1)).isoformat()!r})",
    ),
    "pol_paused": dag_source("pol_paused", schedule="* * * * *", catchup=False),
    # paused for a few seconds, then unpaused: the slots in between are skipped ("paused");
    # and the slots of a stretch without a leader ("leader_unavailable")
    "pol_resumed": dag_source("pol_resumed", schedule=EVERY_2S, catchup=False),
    "pol_outage": dag_source("pol_outage", schedule=EVERY_2S, catchup=False),
    # a slot every 4 s; a run would take 30 s (terminated) or 6 s (cancelled, then waited for)
    "pol_terminate": dag_source(
        "pol_terminate",
        schedule="* * * * * */4",
        command="sleep 30",
        catchup=False,
        overlap="'terminate_other'",
    ),
    "pol_cancel": dag_source(
        "pol_cancel",
        schedule="* * * * * */4",
        command="sleep 6",
        catchup=False,
        overlap="'cancel_other'",
    ),
}
BROKEN = {"pol_broken.py": "from raftsched import DAG\nthis is not python\n"}


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebStack]:
    workdir: Path = tmp_path_factory.mktemp(f"policies-{request.param}")
    files = {f"{dag_id}.py": source for dag_id, source in DAGS.items()} | BROKEN
    with (
        _database(request.param, workdir) as url,
        WebStack(workdir, url, webservers=1, use_nginx=False, dags=files) as web,
    ):
        web.start()
        for dag_id in DAGS:
            wait_for(
                lambda d=dag_id: web.rest("GET", f"/dags/{d}")[0] == 200,
                timeout=90,
                what=f"DAG {dag_id} registered (after the cluster version is raised)",
                interval=0.3,
            )
        yield web


def db_runs(stack: WebStack, dag_id: str) -> list[Any]:
    from raftsched.store.tables import dag_run

    query = (
        sa.select(
            dag_run.c.run_id,
            dag_run.c.logical_date,
            dag_run.c.run_type,
            dag_run.c.state,
            dag_run.c.start_date,
            dag_run.c.end_date,
        )
        .where(dag_run.c.dag_id == dag_id)
        .order_by(dag_run.c.logical_date)
    )
    with stack.cluster.engine.connect() as conn:
        return list(conn.execute(query).all())


def dag(stack: WebStack, dag_id: str) -> dict[str, Any]:
    status, body = stack.rest("GET", f"/dags/{dag_id}")
    assert status == 200, body
    return body


def scheduled(stack: WebStack, dag_id: str) -> list[Any]:
    return [r for r in db_runs(stack, dag_id) if r.run_type == "scheduled"]


def slot_of(value: Any) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@pytest.mark.parametrize("dag_id", ["pol_skip", "pol_buffer_one"])
def test_one_at_a_time_policies_skip_overlapping_slots_and_never_overlap(
    stack: WebStack, dag_id: str
) -> None:
    wait_for(
        lambda: (
            len([r for r in scheduled(stack, dag_id) if r.state == "success"]) >= 2
            and len(dag(stack, dag_id)["skipped"]) >= 2
        ),
        timeout=60,
        what=f"{dag_id}: two finished runs and a skipped range",
        interval=0.5,
    )
    body = dag(stack, dag_id)
    assert body["overlap"] == dag_id.removeprefix("pol_")
    # the two hours before the DAG was parsed (catchup=False drops them), then slots during
    # runs; a slot or two between the parse and the first plan may be dropped too ("catchup")
    reasons = [s["reason"] for s in body["skipped"]]
    assert reasons[0] == "not_parsed" and "overlap" in reasons
    assert set(reasons) <= {"not_parsed", "catchup", "overlap"}
    runs = [r for r in scheduled(stack, dag_id) if r.state == "success"]
    for before, after in itertools.pairwise(runs):
        assert before.end_date is not None and after.start_date is not None
        assert before.end_date <= after.start_date, (before, after)  # never two at once
    # every committed range reaches the DB too (the state keeps the newest 20)
    kept = {(slot_of(s["last"]), s["reason"]) for s in body["skipped"]}
    wait_for(
        lambda: kept <= {(_aware(r.last_slot), r.reason) for r in db_skipped(stack, dag_id)},
        timeout=30,
        what="the skipped ranges in the DB",
    )
    ran = {slot_of(r.logical_date).replace(tzinfo=None) for r in scheduled(stack, dag_id)}
    for s in body["skipped"]:  # a skipped slot never also ran
        assert slot_of(s["first"]).replace(tzinfo=None) not in ran
        assert slot_of(s["last"]).replace(tzinfo=None) not in ran


def test_buffer_all_loses_no_slot_across_a_leader_kill(stack: WebStack) -> None:
    dag_id = "pol_buffer_all"
    wait_for(
        lambda: len(scheduled(stack, dag_id)) >= 2,
        timeout=60,
        what="two buffer_all runs",
        interval=0.5,
    )
    cluster = stack.cluster
    leader = cluster.wait_leader(timeout=30)
    cluster.kill(leader)
    cluster.wait_leader(timeout=60, exclude={leader})
    cluster.start_node(leader)
    count = len(scheduled(stack, dag_id))
    wait_for(
        lambda: len(scheduled(stack, dag_id)) >= count + 2,
        timeout=60,
        what="two more buffer_all runs after the failover",
        interval=0.5,
    )
    runs = scheduled(stack, dag_id)
    slots = [slot_of(r.logical_date).replace(tzinfo=None) for r in runs]
    assert len(set(slots)) == len(slots)  # none twice
    gaps = {b - a for a, b in itertools.pairwise(slots)}
    assert gaps == {timedelta(seconds=2)}, slots  # none lost: every 2-second slot, in order
    assert {s["reason"] for s in dag(stack, dag_id)["skipped"]} <= {"not_parsed", "catchup"}


def test_catchup_window_skips_older_slots_with_the_reason(stack: WebStack) -> None:
    dag_id = "pol_window"
    wait_for(lambda: len(scheduled(stack, dag_id)) >= 5, timeout=60, what="the window's runs")
    body = dag(stack, dag_id)
    # the window drops them; they were missed because the DAG was parsed only now
    [first] = [s for s in body["skipped"] if s["reason"] == "not_parsed"]
    first_minute = START.replace(second=0) + timedelta(minutes=1 if START.second else 0)
    assert slot_of(first["first"]) == first_minute
    runs = scheduled(stack, dag_id)
    oldest = slot_of(runs[0].logical_date).replace(tzinfo=None)
    assert oldest == (slot_of(first["last"]) + timedelta(minutes=1)).replace(tzinfo=None)
    assert len(runs) <= 7  # the window's five slots, and those due since the test began


def test_max_runs_stops_scheduling_and_manual_runs_still_work(stack: WebStack) -> None:
    dag_id = "pol_limited"
    wait_for(lambda: len(scheduled(stack, dag_id)) >= 3, timeout=60, what="three runs")
    body = wait_for(
        lambda: (b := dag(stack, dag_id))["scheduled_runs"] == 3 and b,
        timeout=30,
        what="scheduled_runs at 3",
    )
    assert body["max_runs"] == 3 and body["next_run"] is None
    status, run = stack.rest("POST", f"/dags/{dag_id}/runs", {"run_id": "by_hand"})
    assert status == 201, run
    wait_for(
        lambda: any(r.run_id == "by_hand" for r in db_runs(stack, dag_id)),
        timeout=30,
        what="the manual run in the DB",
    )
    assert len(scheduled(stack, dag_id)) == 3


def test_jittered_slots_run_once_each(stack: WebStack) -> None:
    dag_id = "pol_jitter"
    wait_for(lambda: len(scheduled(stack, dag_id)) >= 3, timeout=60, what="jittered runs")
    body = dag(stack, dag_id)
    assert body["jitter_seconds"] == 1.0
    slots = [r.logical_date for r in scheduled(stack, dag_id)]
    assert len(set(slots)) == len(slots)


def test_pause_on_failure_and_pause_notes(stack: WebStack) -> None:
    dag_id = "pol_fail"
    body = wait_for(
        lambda: (b := dag(stack, dag_id))["paused"] and b,
        timeout=60,
        what="the DAG paused by its failed run",
        interval=0.5,
    )
    [run] = db_runs(stack, dag_id)
    assert body["pause_note"] == f"paused after run {run.run_id} failed"
    done = stack.cli("dags", "show", dag_id)
    assert done.returncode == 0 and f"paused after run {run.run_id} failed" in done.stdout
    status, _ = stack.rest("POST", f"/dags/{dag_id}/unpause")
    assert status == 200 and dag(stack, dag_id)["pause_note"] == ""
    done = stack.cli("dags", "pause", dag_id, "--note", "investigating exit 3")
    assert done.returncode == 0, done.stderr
    assert dag(stack, dag_id)["pause_note"] == "investigating exit 3"
    status, body = stack.rest("POST", f"/dags/{dag_id}/pause", {"note": "x" * 1001})
    assert status == 400, body


def explain(stack: WebStack, dag_id: str, at: datetime | None = None) -> dict[str, Any]:
    query = f"?at={at.isoformat().replace('+', '%2B')}" if at is not None else ""
    status, body = stack.rest("GET", f"/dags/{dag_id}/explain{query}")
    assert status == 200, body
    return body


def test_dags_explain_answers_each_situation_from_committed_state(stack: WebStack) -> None:
    """At least 15 situations, each from what the live cluster committed."""
    done = stack.cli("dags", "pause", "pol_paused", "--note", "vendor outage")
    assert done.returncode == 0, done.stderr
    paused_at, outage_at = _pause_a_while(stack), _lose_the_leader_a_while(stack)
    wait_for(lambda: dag(stack, "pol_limited")["scheduled_runs"] == 3, timeout=60, what="3 runs")
    wait_for(lambda: dag(stack, "pol_fail")["paused"], timeout=60, what="pol_fail paused")
    wait_for(lambda: len(dag(stack, "pol_skip")["skipped"]) >= 2, timeout=60, what="skipped slots")
    wait_for(lambda: scheduled(stack, "pol_window"), timeout=60, what="pol_window runs")
    window_run = scheduled(stack, "pol_window")[-1]
    overlap = next(s for s in dag(stack, "pol_skip")["skipped"] if s["reason"] == "overlap")
    limited_runs = scheduled(stack, "pol_limited")
    now = utcnow()
    run_slot = slot_of(window_run.logical_date)
    if run_slot.tzinfo is None:
        run_slot = run_slot.replace(tzinfo=START.tzinfo)
    cases: list[tuple[str, str, datetime | None, str, str]] = [
        ("unknown DAG", "no_such_dag", None, "unknown_dag", "no parsed file"),
        ("file fails to import", "pol_broken", None, "import_error", "fails to import"),
        ("manual only", "pol_manual", None, "manual_only", "triggered"),
        ("before start_date", "pol_window", START - timedelta(days=1), "no_slot", "start_date"),
        ("after end_date", "pol_ended", now, "after_end_date", "end_date"),
        ("created", "pol_window", run_slot, "created", "scheduled run"),
        (
            "a time between slots",
            "pol_window",
            run_slot + timedelta(seconds=30),
            "created",
            "the slot at or before",
        ),
        (
            "skipped: not parsed yet (the window drops it)",
            "pol_window",
            START + timedelta(minutes=10),
            "skipped",
            "(not_parsed)",
        ),
        ("created by a leader term", "pol_window", run_slot, "created", "by leader term "),
        ("skipped: paused", "pol_resumed", paused_at, "skipped", "(paused)"),
        ("skipped: no leader", "pol_outage", outage_at, "skipped", "(leader_unavailable)"),
        ("skipped: overlap", "pol_skip", slot_of(overlap["first"]), "skipped", "overlap"),
        (
            "skipped: not parsed yet (catchup=False drops it)",
            "pol_skip",
            START + timedelta(minutes=1),
            "skipped",
            "(not_parsed)",
        ),
        ("not yet due", "pol_window", now + timedelta(hours=1), "not_yet_due", "not yet due"),
        ("max_runs reached", "pol_limited", now, "max_runs", "made its 3 runs"),
        (
            "a limited DAG's run",
            "pol_limited",
            _aware(limited_runs[0].logical_date),
            "created",
            "scheduled run",
        ),
        ("paused after a failure: its one run", "pol_fail", now, "created", "now failed"),
        (
            "skipped before the first run",
            "pol_limited",
            START + timedelta(seconds=1),
            "skipped",
            "(not_parsed)",
        ),
    ]
    failures = []
    for name, dag_id, at, verdict, words in cases:
        answer = explain(stack, dag_id, at)
        if answer["verdict"] != verdict or words not in answer["detail"]:
            failures.append((name, answer))
    assert not failures, failures
    # paused, with its note: the paused DAG's next minute slot comes due within a minute
    paused_answer = wait_for(
        lambda: (a := explain(stack, "pol_paused"))["verdict"] == "paused" and a,
        timeout=75,
        what="a due slot of the paused DAG",
        interval=1.0,
    )
    assert "vendor outage" in paused_answer["detail"]
    # the CLI gives the same answer, and says how far back the DB's runs reach
    done = stack.cli("dags", "explain", "pol_limited", "--at", now.isoformat())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("max_runs: ") and "runs in the DB reach back to" in done.stdout
    # and the DAG page: its note, its skipped slots, and the same answer
    session = stack.login()
    status, _, page = session.get("/dags/pol_paused")
    assert status == 200 and "vendor outage" in page
    status, _, page = session.get("/dags/pol_skip")
    assert status == 200 and 'id="skipped-slots"' in page
    status, _, page = session.get("/dags/pol_resumed?runs=100")  # a grid column, reason on hover
    assert status == 200 and 'class="cell skipped-slots" title="skipped (paused: ' in page
    status, _, page = session.get("/dags/pol_limited?explain_at=" + now.isoformat()[:19])
    assert status == 200 and "made its 3 runs" in page, page[-2000:]


def _pause_a_while(stack: WebStack) -> datetime:
    """Pause pol_resumed for 6 s (three slots), unpause it, wait for its next run; a time in
    the pause."""
    wait_for(lambda: scheduled(stack, "pol_resumed"), timeout=60, what="pol_resumed runs")
    assert stack.cli("dags", "pause", "pol_resumed").returncode == 0
    paused = utcnow()
    wait_for(lambda: utcnow() > paused + timedelta(seconds=6), timeout=10, what="6 s", interval=0.5)
    assert stack.cli("dags", "unpause", "pol_resumed").returncode == 0
    back = utcnow()
    wait_for(
        lambda: any(_aware(r.logical_date) > back for r in scheduled(stack, "pol_resumed")),
        timeout=60,
        what="pol_resumed's run after the unpause",
    )
    return paused + timedelta(seconds=3)


def _lose_the_leader_a_while(stack: WebStack) -> datetime:
    """Kill the leader and a follower (no quorum, so no leader) for 10 s, start them again,
    wait for pol_outage's next run; a time in the outage."""
    cluster = stack.cluster
    wait_for(lambda: scheduled(stack, "pol_outage"), timeout=60, what="pol_outage runs")
    leader = cluster.wait_leader(timeout=30)
    other = next(i for i in range(3) if i != leader)
    lost = utcnow()
    cluster.kill(leader)
    cluster.kill(other)
    wait_for(lambda: utcnow() > lost + timedelta(seconds=10), timeout=15, what="10 s", interval=0.5)
    cluster.start_node(leader)
    cluster.start_node(other)
    cluster.wait_leader(timeout=60)
    back = utcnow()
    wait_for(
        lambda: any(_aware(r.logical_date) > back for r in scheduled(stack, "pol_outage")),
        timeout=60,
        what="pol_outage's run after the outage",
    )
    return lost + timedelta(seconds=5)


def _aware(value: Any) -> datetime:
    when = slot_of(value)
    return when if when.tzinfo else when.replace(tzinfo=START.tzinfo)


def ti_rows(stack: WebStack, dag_id: str) -> list[Any]:
    from raftsched.store.tables import task_instance

    query = sa.select(task_instance.c.run_id, task_instance.c.state, task_instance.c.message).where(
        task_instance.c.dag_id == dag_id
    )
    with stack.cluster.engine.connect() as conn:
        return list(conn.execute(query).all())


@pytest.mark.parametrize("dag_id", ["pol_terminate", "pol_cancel"])
def test_cancel_and_terminate_other_across_a_leader_kill(stack: WebStack, dag_id: str) -> None:
    wait_for(lambda: len(scheduled(stack, dag_id)) >= 2, timeout=60, what=f"{dag_id}: 2 runs")
    cluster = stack.cluster
    leader = cluster.wait_leader(timeout=30)
    cluster.kill(leader)  # in the middle: a run is active and the next slot is coming
    cluster.wait_leader(timeout=60, exclude={leader})
    cluster.start_node(leader)
    count = len(scheduled(stack, dag_id))
    wait_for(
        lambda: len(scheduled(stack, dag_id)) >= count + 2,
        timeout=60,
        what=f"{dag_id}: two more runs after the failover",
        interval=0.5,
    )
    runs = scheduled(stack, dag_id)
    slots = [slot_of(r.logical_date) for r in runs]
    assert len(set(slots)) == len(slots)  # no slot twice
    ended = [r for r in runs[:-2] if r.end_date is not None]
    for before, after in itertools.pairwise(runs[:-1]):
        if before.end_date is not None and after.start_date is not None:
            assert before.end_date <= after.start_date, (before, after)  # one at a time
    messages = {row.message for row in ti_rows(stack, dag_id)}
    if dag_id == "pol_terminate":
        # every run but the newest was killed by the next slot, through its lease
        assert "ended by the DAG's overlap policy" in messages
        assert {r.state for r in ended} == {"failed"}
    else:
        assert {r.state for r in ended} <= {"success", "failed"}
    cluster.assert_replicas_agree(min_comparisons=0)


def db_skipped(stack: WebStack, dag_id: str) -> list[Any]:
    from raftsched.store.tables import skipped_slots

    query = sa.select(skipped_slots).where(skipped_slots.c.dag_id == dag_id)
    with stack.cluster.engine.connect() as conn:
        return list(conn.execute(query).all())
