"""The schedule in words (web/cron_text.py) and the server-side SVG charts (web/charts.py):
their geometry from plain run and task-instance values, no cluster needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from raftsched.web import charts, cron_text

T0 = datetime(2026, 1, 1, 6, 0, tzinfo=UTC)


def test_cron_in_words_with_a_24_hour_clock() -> None:
    dag = {"schedule_kind": "cron", "cron": "0 6 * * 1-5", "manual_only": False}
    assert cron_text.describe(dag) == "At 06:00, Monday through Friday"
    assert cron_text.describe({**dag, "cron": "*/15 * * * *"}) == "Every 15 minutes"


def test_no_words_for_what_cannot_be_read_or_is_manual() -> None:
    assert cron_text.describe({"schedule_kind": "cron", "cron": "not a cron"}) == ""
    assert cron_text.describe({"schedule_kind": "cron", "cron": "* " * 200}) == ""
    assert cron_text.describe({"manual_only": True, "schedule_kind": "none"}) == ""
    assert cron_text.describe({"schedule_kind": "once"}) == ""


def test_interval_in_words() -> None:
    dag = {"schedule_kind": "interval", "interval_seconds": 7200}
    assert cron_text.describe(dag) == "Every 2 hours"
    assert cron_text.interval_text(86400 + 6 * 3600 + 5) == "Every 1 day, 6 hours"


def _run(run_id: str, seconds: float | None, **extra: object) -> dict:
    end = T0 + timedelta(seconds=seconds) if seconds is not None else None
    return {"run_id": run_id, "state": "success", "start_date": T0, "end_date": end, **extra}


def test_run_durations_scale_to_the_longest_and_skip_unended_runs() -> None:
    chart = charts.run_durations([_run("a", 30), _run("b", 60), _run("c", None)])
    a, b, c = chart["bars"]
    assert b["h"] == chart["height"] and a["h"] == chart["height"] / 2
    assert c["seconds"] is None and c["h"] == 0
    assert a["x"] < b["x"] < c["x"]
    assert chart["max_text"] == "1m 00s" and not chart["empty"]
    assert charts.run_durations([_run("x", None)])["empty"]


def test_schedule_delay_only_for_scheduled_runs() -> None:
    late = _run("s", 10, run_type="scheduled", data_interval_end=T0 - timedelta(seconds=90))
    manual = _run("m", 10, run_type="manual", data_interval_end=T0 - timedelta(hours=1))
    chart = charts.schedule_delays([late, manual])
    assert chart["bars"][0]["seconds"] == 90 and chart["bars"][1]["seconds"] is None


def test_task_durations_one_scale_for_every_task() -> None:
    grid = {
        "runs": [{"run_id": "r1"}, {"run_id": "r2"}],
        "tasks": ["fast", "slow"],
        "cells": {
            "fast": [{"state": "success"}, {"state": "success"}],
            "slow": [{"state": "failed"}, None],
        },
        "durations": {"fast": [1.0, 2.0], "slow": [8.0, None]},
    }
    chart = charts.task_durations(grid)
    fast, slow = chart["rows"]
    assert [b["run_id"] for b in fast["bars"]] == ["r1", "r2"]
    assert slow["bars"][0]["h"] == 4 * fast["bars"][1]["h"]
    assert slow["bars"][0]["state"] == "failed" and len(slow["bars"]) == 1


def test_gantt_queued_then_running_on_one_axis() -> None:
    tis = [
        {
            "task_id": "extract",
            "state": "success",
            "queued_at": T0,
            "start_date": T0 + timedelta(seconds=10),
            "end_date": T0 + timedelta(seconds=40),
        },
        {
            "task_id": "load",
            "state": "failed",
            "queued_at": T0 + timedelta(seconds=40),
            "start_date": T0 + timedelta(seconds=40),
            "end_date": T0 + timedelta(seconds=100),
        },
        {"task_id": "never", "state": "none", "queued_at": None, "start_date": None},
    ]
    chart = charts.gantt(tis)
    extract, load, never = chart["rows"]
    queued, ran = extract["segments"]
    assert queued["state"] == "queued" and ran["state"] == "success"
    assert queued["x"] == charts.LABEL and ran["x"] == queued["x"] + queued["w"]
    assert [s["state"] for s in load["segments"]] == ["failed"]  # never waited: no grey
    assert load["segments"][0]["x"] + load["segments"][0]["w"] == charts.LABEL + charts.WIDTH
    assert never["segments"] == [] and chart["total_text"] == "1m 40s"
    assert charts.gantt([{"task_id": "t", "queued_at": None, "start_date": None}])["empty"]
