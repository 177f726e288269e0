"""Numbers in a REST body are bounded while it is parsed (web/api/body.py): a literal Python
cannot or must not build answers 400 INVALID_ARGUMENT naming it, never 500, and nothing of
the request reaches the cluster."""

from __future__ import annotations

import pytest
from web_support import TOKEN

RUNS = "/api/v1/dags/etl_daily/runs"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"conf": {"a": ' + "9" * 5000 + "}}", "an integer of 5000 digits"),
        ('{"conf": {"a": -' + "9" * 5000 + "}}", "an integer of 5000 digits"),
        ('{"conf": {}, "run_id": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
        ('{"conf": {"a": ' + "9" * 20 + "}}", "an integer of 20 digits"),
        ('{"conf": {"a": 1e999}}', "the number 1e999, which is out of range"),
        ('{"conf": {"a": -1e999}}', "the number -1e999, which is out of range"),
        ('{"conf": {"a": NaN}}', "NaN, which is not JSON"),
        ('{"conf": {"a": -Infinity}}', "-Infinity, which is not JSON"),
    ],
)
def test_a_number_past_the_bounds_is_a_400_naming_it(client, canned, body, message) -> None:
    answer = client.post(RUNS, data=body, headers=HEADERS)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    problem = answer.get_json()
    assert problem["code"] == "INVALID_ARGUMENT" and problem["field"] == "body"
    assert message in problem["message"]
    if "digits" in message:
        assert "integers are limited to 19 digits" in problem["message"]
        assert len(problem["message"]) < 300  # the literal is not echoed whole
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


def test_numbers_within_the_bounds_pass(client, canned) -> None:
    body = '{"conf": {"max": 9223372036854775807, "min": -9223372036854775807, "f": 1.5e308}}'
    answer = client.post(RUNS, data=body, headers=HEADERS)
    assert answer.status_code == 201, answer.get_data(as_text=True)
    assert answer.get_json()["conf"] == {
        "max": 9223372036854775807, "min": -9223372036854775807, "f": 1.5e308
    }  # fmt: skip


def test_a_body_that_is_not_utf8_is_a_400(client, canned) -> None:
    answer = client.post(RUNS, data=b'{"conf": "\xff"}', headers=HEADERS)
    assert answer.status_code == 400 and answer.get_json()["code"] == "INVALID_ARGUMENT"
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


@pytest.mark.parametrize("header", ["9" * 5000, "\u00b2", "1" * 20, "-1"])
def test_a_min_index_header_past_the_bounds_is_a_400_naming_it(client, canned, header) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Raftsched-Min-Index": header}
    answer = client.get("/api/v1/dags", headers=headers)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    problem = answer.get_json()
    assert problem["field"] == "X-Raftsched-Min-Index"
    assert "expected a non-negative integer" in problem["message"], problem
