"""A task's extras for its outlets' asset events (Airflow's ``outlet_events[asset].extra`` and
``yield Metadata(asset, extra)``): collected in the task process, carried in the result file,
bounded and masked by the worker (docs/architecture.md §21)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched.dags import assets, xcom_args
from raftsched.dags.assets import Asset, Metadata
from raftsched.errors import XComError
from raftsched.worker.results import _masked_extras

A, B = "s3://lake/a", "s3://lake/b"


def test_outlet_events_and_yielded_metadata_merge_into_the_declared_outlets_extras(
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = assets.new_outlet_events((A, B))
    events[Asset(A)].extra = {"rows": 5}
    events["s3://lake/other"].extra["x"] = 1  # not an outlet: dropped with a warning

    def task():  # a @task generator: its Metadata go to outlet_events, its return is kept
        yield Metadata(Asset(B), extra={"part": 1})
        yield Metadata(B, {"more": True})
        yield "something else"
        return "done"

    assert assets.consume_metadata(task()) == "done"
    assert assets.consume_metadata(7) == 7
    assert assets.outlet_extras_json() == {A: '{"rows":5}', B: '{"part":1,"more":true}'}
    err = capsys.readouterr().err
    assert "not an outlet" in err and "ignoring str" in err
    assert assets.new_outlet_events(()) is not events  # a new attempt forgets the last one's
    assert assets.outlet_extras_json() == {}


def test_an_extra_past_the_bounds_or_not_json_is_an_error_of_the_attempt() -> None:
    events = assets.new_outlet_events((A,))
    events[A].extra = {"blob": "v" * 5_000}
    with pytest.raises(XComError, match="limit is 4096"):
        assets.outlet_extras_json()
    events[A].extra = {"when": object()}
    with pytest.raises(XComError, match="JSON-serializable"):
        assets.outlet_extras_json()
    with pytest.raises(NotImplementedError):
        Metadata(A, {}, alias="an-alias")


def test_the_result_file_carries_the_extras_and_the_worker_bounds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / xcom_args.RESULT_FILE_NAME
    monkeypatch.setenv(xcom_args.RESULT_FILE_ENV, str(path))
    xcom_args.write_result('"v"', None, outlet_extras={B: "{}", A: '{"rows":5}'})
    assert xcom_args.read_outlet_extras(str(path)) == ((A, '{"rows":5}'), (B, "{}"))
    assert xcom_args.read_result(str(path))[0] == '"v"'
    xcom_args.write_result("", None)
    assert xcom_args.read_outlet_extras(str(path)) == ()
    path.write_text('{"return_value_json": "", "outlet_extras": {"s3://a": "[1]"}}')
    with pytest.raises(XComError, match="JSON object"):
        xcom_args.read_outlet_extras(str(path))
    path.write_text('{"return_value_json": "", "outlet_extras": ["s3://a"]}')
    with pytest.raises(XComError, match="format"):
        xcom_args.read_outlet_extras(str(path))


def test_secret_values_are_masked_in_the_extras() -> None:
    extras = ((A, '{"dsn":"postgres://u:hunter2-secret@h/db","rows":5}'),)
    assert _masked_extras(extras, ["hunter2-secret"]) == (
        (A, '{"dsn":"postgres://u:***@h/db","rows":5}'),
    )
    assert _masked_extras(extras, []) == extras
