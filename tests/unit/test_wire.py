"""raftsched.api.wire: the one message <-> data conversion behind the CLI and the web."""

from __future__ import annotations

from datetime import UTC, datetime

from raftsched.api import wire
from raftsched.api.gen import common_pb2, dag_pb2


def test_to_dict_short_enums_iso_timestamps_and_unset_optionals() -> None:
    run = dag_pb2.DagRun(
        dag_id="etl",
        run_id="r1",
        state=common_pb2.RUN_STATE_SUCCESS,
        logical_date=wire.to_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    )
    data = wire.to_dict(run)
    assert data["dag_id"] == "etl" and data["state"] == "success"
    assert data["logical_date"] == "2026-01-02T03:04:05+00:00"
    assert data["end_date"] is None  # unset Timestamp
    assert wire.when(run, "logical_date") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert wire.when(run, "end_date") is None


def test_enum_names_by_name_and_by_number() -> None:
    assert wire.enum_short("TASK_STATE_UP_FOR_RETRY", "TaskState") == "up_for_retry"
    assert wire.enum_short("RUN_STATE_UNSPECIFIED", "RunState") is None
    assert wire.enum_text(common_pb2.TaskState, common_pb2.TASK_STATE_UP_FOR_RETRY) == (
        "up_for_retry"
    )
    assert wire.enum_text(common_pb2.TaskState, 0) == ""
    assert wire.enum_text(common_pb2.TaskState, 9999) == ""  # a newer server's state
