"""The DAG page's grid shows each run's state as read with its cells (web/grid.py): the run
list is read first, so without that a refresh could show every cell green beside a run still
"running" (a state the cluster never was in; tests/browser/test_ui.py once saw it)."""

from __future__ import annotations

from typing import Any

from raftsched.web import grid


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
