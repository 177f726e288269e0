"""Issue #9 in the web UI: a conf, run id or logical date the cluster would refuse is a form
error on the trigger page (HTTP 400, the message in the page), never a 500."""

from __future__ import annotations

import pytest
from raftsched.web.gateway import Gateway, Refused
from web_support import csrf_token, login

from raftsched.core import limits

TRIGGER = "/dags/etl_daily/trigger"


def post(client, **data):
    login(client, "op")
    data.setdefault("conf", "{}")
    data["csrf_token"] = csrf_token(client, TRIGGER)
    return client.post(TRIGGER, data=data)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("[" * 60_000 + "]" * 60_000, f"conf is nested deeper than {limits.MAX_CONF_DEPTH} levels"),
        ("[" * 100_000 + "]" * 100_000, "conf is 200000 characters long"),
        (
            '{"a":' * 500 + "1" + "}" * 500,
            f"conf is nested deeper than {limits.MAX_CONF_DEPTH} levels",
        ),
        ('{"a": "' + "x" * 70_000 + '"}', f"the limit is {limits.MAX_CONF_BYTES}"),
        ('{"a": "x\\u0000y"}', "conf has a string with NUL or invalid UTF-8"),
        ('{"a": "\\ud800"}', "conf has a string with NUL or invalid UTF-8"),
        ('{"a": 1e999}', "which JSON cannot carry"),
        ('{"a": ' + "9" * 30 + "}", "conf has an integer beyond 64 bits"),
        ('{"a": ' + "9" * 5000 + "}", "integers are limited to 64 bits"),
        ('"a string"', "expected a JSON object"),
    ],
)
def test_a_conf_past_the_bounds_is_a_form_error(client, canned, conf, message) -> None:
    response = post(client, conf=conf)
    assert response.status_code == 400
    text = response.get_data(as_text=True)
    assert message in text and 'id="trigger-form"' in text
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


@pytest.mark.parametrize(
    "when",
    ["0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00", "9999-12-31T23:59:59", "1899-12-31"],
)
def test_a_logical_date_out_of_range_is_a_form_error(client, canned, when) -> None:
    response = post(client, logical_date=when)
    assert response.status_code == 400
    assert "out of range" in response.get_data(as_text=True)
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


@pytest.mark.parametrize("run_id", ["r" * 251, "bad\nrun", "bad\x00run"])
def test_a_bad_run_id_is_a_form_error(client, canned, run_id) -> None:
    response = post(client, run_id=run_id)
    assert response.status_code == 400 and b'id="trigger-form"' in response.data
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


def test_the_cluster_refusing_a_run_id_is_shown_in_the_form(client, canned, monkeypatch) -> None:
    message = "run_id is 300 characters long; the limit is 250"

    def refuse(self, *args, **kwargs):
        raise Refused(message, "INVALID_ARGUMENT")

    monkeypatch.setattr(Gateway, "trigger", refuse)
    response = post(client, run_id="fine")
    assert response.status_code == 400
    text = response.get_data(as_text=True)
    assert message in text and 'id="trigger-form"' in text


def test_values_at_the_bounds_are_accepted(client, canned) -> None:
    depth = limits.MAX_CONF_DEPTH - 1
    conf = '{"a":' * depth + "1" + "}" * depth
    response = post(client, conf=conf, run_id="r" * 250, logical_date="1900-01-01T00:00:00Z")
    assert response.status_code == 302
    (request,) = [r for name, r in canned.calls if name == "TriggerDag"]
    assert request.run_id == "r" * 250
    assert request.logical_date.ToJsonString() == "1900-01-01T00:00:00Z"
