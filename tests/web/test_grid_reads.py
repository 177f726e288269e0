"""The DAG page's grid shows each run's state as read with its cells (web/grid.py): the run
list is read first, so without that a refresh could show every cell green beside a run still
"running" (a state the cluster never was in; tests/browser/test_ui.py once saw it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from raftsched.web import grid
from web_support import T0, login


class _Gateway:
    """The run finishes between the list and the read of its task instances."""

    def list_runs(self, dag_id: str, *, page_size: int) -> dict[str, Any]:
        return {"runs": [{"run_id": "r1", "state": "running", "end_date": None}]}

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return {
            "run": {"run_id": run_id, "state": "success", "end_date": "later"},
            "task_instances": [{"task_id": "t", "state": "success", "try_number": 1}],
        }


def test_a_runs_state_is_the_one_read_with_its_cells() -> None:
    built = grid.build(_Gateway(), "d", ["t"], 5)  # type: ignore[arg-type]
    (run,) = built["runs"]
    assert run["state"] == "success" and run["end_date"] == "later"
    assert built["cells"]["t"] == [{"state": "success", "try_number": 1}]


class _Mapped(_Gateway):
    def task_instances(self, dag_id: str, run_id: str) -> dict[str, Any]:
        states = ["success"] * 998 + ["running", "up_for_retry"]
        return {
            "run": {"run_id": run_id, "state": "running", "end_date": None},
            "task_instances": [
                {"task_id": "m", "state": "none", "try_number": 0},
                *(
                    {"task_id": f"m[{i}]", "state": state, "try_number": 1}
                    for i, state in enumerate(states)
                ),
            ],
        }


def test_a_mapped_tasks_instances_fold_into_one_cell() -> None:
    built = grid.build(_Mapped(), "d", ["m"], 5)  # type: ignore[arg-type]
    assert built["tasks"] == ["m"]  # not a row per instance
    assert built["cells"]["m"] == [
        {
            "state": "running",
            "try_number": 0,
            "mapped": "1000 mapped instances: 1 running, 998 success, 1 up for retry",
        }
    ]


def test_skipped_ranges_are_columns_between_the_runs_they_fell_between() -> None:
    day = timedelta(days=1)
    runs = [{"run_id": f"r{i}", "logical_date": T0 + i * day} for i in range(3)]
    skipped = [
        {"first": T0 - 3 * day, "last": T0 - day, "count": 3, "reason": "catchup"},
        {"first": T0 + day / 4, "last": T0 + day / 2, "count": 0, "reason": "paused"},
        {"first": T0 + 3 * day, "last": T0 + 3 * day, "count": 1, "reason": "overlap"},
    ]
    cols = grid.columns(runs, skipped, full=True)  # the oldest range is before the grid
    assert [c.get("run", c.get("skipped", {}).get("reason")) for c in cols] == [
        0,
        "paused",
        1,
        2,
        "overlap",
    ]
    paused = cols[1]["skipped"]
    assert paused["title"] == (
        f"skipped (paused: slots from {(T0 + day / 4).isoformat()} to {(T0 + day / 2).isoformat()})"
    )
    assert len(grid.columns(runs, skipped, full=False)) == 6  # all runs shown: all ranges


def test_dag_page_and_grid_json_show_skipped_slots_with_their_reason(client, canned) -> None:
    login(client, "viewer")
    canned.skipped["etl_daily"] = [
        (T0 + timedelta(hours=6), T0 + timedelta(hours=18), 525_600, "leader_unavailable")
    ]
    page = client.get("/dags/etl_daily").get_data(as_text=True)
    assert page.count('class="cell skipped-slots"') == 3  # one per task row
    assert "skipped (leader unavailable: 525,600 slots from" in page
    data = client.get("/dags/etl_daily/grid.json").json
    kinds = [("run" if "run" in c else c["skipped"]["reason"]) for c in data["columns"]]
    assert kinds == ["run", "leader_unavailable", "run", "run"]
    assert data["columns"][1]["skipped"]["count"] == 525_600
