"""Verdict 7 of the partition checker: one client's reads never go back (issue #15)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from scripts.partition.report import build
from scripts.partition.sessions import ClientOp, check_client_sessions

T = datetime(2026, 1, 1, tzinfo=UTC)


def op(name: str, index: int, *, node: str = "n1", target: str = "*", **kw) -> ClientOp:
    return ClientOp(T, name, target, node=node, index=index, **kw)


def test_answers_that_never_go_back_pass_and_failed_calls_are_allowed():
    verdict = check_client_sessions(
        [
            op("ListDags", 5, listed=("a",)),
            ClientOp(T, "GetDag", "a", outcome="UNAVAILABLE"),
            op("GetDag", 5, node="n2", target="a"),
            op("ListRuns", 9, node="n3", target="a"),
        ]
    )
    assert verdict.ok and verdict.checked == 3
    assert "1 calls failed" in verdict.notes[0]


def test_an_older_answer_is_went_back():
    verdict = check_client_sessions([op("ListDags", 9), op("ListRuns", 7, node="n3")])
    assert [v.kind for v in verdict.violations] == ["went-back"]
    assert "index 7, after index 9 from n1" in verdict.violations[0].detail


def test_refusing_or_losing_a_seen_dag_is_refused_seen():
    verdict = check_client_sessions(
        [
            op("ListDags", 5, listed=("a", "b")),
            ClientOp(T, "GetDag", "a", node="n2", outcome="NOT_FOUND"),
            op("ListDags", 6, node="n3", listed=("b",)),
        ]
    )
    assert [v.kind for v in verdict.violations] == ["refused-seen", "refused-seen"]


def test_no_answer_at_all_is_vacuous_and_the_report_stays_json():
    verdict = check_client_sessions([ClientOp(T, "ListDags", "*", outcome="UNAVAILABLE")])
    assert [v.kind for v in verdict.violations] == ["vacuous"]
    went_back = check_client_sessions([op("ListDags", 9), op("ListDags", 3)])
    data = build(
        [verdict, went_back],
        seed=1,
        profile="short",
        timeline=[],
        leader_changes=[],
        counts={},
        environment={},
        started_at=T,
    )
    assert json.loads(json.dumps(data))["verdict"] == "FAIL"
