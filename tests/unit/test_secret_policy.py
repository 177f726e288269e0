"""Variables and connections restricted to DAGs, and on-demand reads (core.secret_policy,
core.secret_reads): a restricted one is read by its DAGs only, an on-demand read needs the
live lease of its worker and leaves one audit record per name (never a value), a refused read
records nothing, and the restriction survives a snapshot, the outbox and the version gate."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core import secret_policy as policy
from raftsched.core import secret_reads as sr
from raftsched.core.model import OutboxKind
from raftsched.core.secret_table import SecretRecord, fp_secret
from raftsched.core.state import SchedulerState
from raftsched.core.validate import check_command
from raftsched.core.versions import BASELINE_RELEASE, RELEASE, refusal
from raftsched.errors import LimitExceeded
from tests.unit.test_state_harness import T0, Sim, at, dag, task

CIPHER = Fernet(Fernet.generate_key()).encrypt(b"v").decode()


def _sim() -> Sim:
    sim = Sim()
    assert sim.register(dag("d", task("a")), dag("e", task("b"))).ok
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=RELEASE)).ok
    return sim


def _set(sim: Sim, key: str, dags: tuple[str, ...] = (), kind: str = "variable") -> r.Result:
    return sim.apply(
        c.SetSecret(request_id=sim.rid(), now=T0, kind=kind, key=key, ciphertext=CIPHER, dags=dags)
    )


def _read(sim: Sim, grant, names: tuple[str, ...], **kw) -> r.Result:  # type: ignore[no-untyped-def]
    fields = {
        "key": grant.lease.key,
        "token": grant.lease.token,
        "worker_id": "w1",
        "kind": "variable",
        "names": names,
        "now": at(1),
    }
    fields.update(kw)
    return sim.apply(sr.ReadSecrets(request_id=sim.rid(), **fields))


def _leased(sim: Sim, dag_id: str):  # type: ignore[no-untyped-def]
    assert sim.create(dag_id).ok
    (grant,) = sim.lease()
    assert grant.lease.key.dag_id == dag_id
    return grant


def _reads(state: SchedulerState) -> list[tuple[str, str, str, str]]:
    return [(a.actor, a.action, a.dag_id, a.detail) for a in state.audit if "read" in a.action]


def test_policy_allows_listed_dags_only_and_says_who_may() -> None:
    assert policy.allows((), "any")
    assert policy.allows(("a", "b"), "b") and not policy.allows(("a", "b"), "c")
    assert policy.refusal("variable", "X", ("a", "b"), "c") == (
        "variable X is restricted to DAGs a,b: DAG c may not read it"
    )
    assert policy.normalized([" b", "a", "b", ""]) == ("a", "b")
    assert policy.check_dags("dags", ("a", "b")) == ("a", "b")
    for bad in (("b", "a"), ("a", "a"), ["a"], ("",), ("x\n",)):
        with pytest.raises(LimitExceeded):
            policy.check_dags("dags", bad)
    with pytest.raises(LimitExceeded):
        policy.check_dags("dags", tuple(f"d{i:03}" for i in range(policy.MAX_SECRET_DAGS + 1)))


def test_a_restriction_is_kept_compared_and_snapshotted() -> None:
    sim = _sim()
    assert _set(sim, "X", ("d",)).ok
    assert sim.state.secrets.get(("variable", "X")).dags == ("d",)
    assert _set(sim, "X", ("d",)).reason == r.UNCHANGED
    assert _set(sim, "X", ("d", "e")).reason == ""  # another list is a change
    row = sim.outbox(OutboxKind.SECRET.value)[-1]
    assert row["dags"] == "d,e"
    restored = SchedulerState.restore(sim.state.snapshot())
    assert restored.secrets.get(("variable", "X")).dags == ("d", "e")
    assert restored.digest() == sim.state.digest()
    assert _set(sim, "X").ok and sim.state.secrets.get(("variable", "X")).dags == ()


def test_an_unrestricted_record_digests_snapshots_and_emits_as_before() -> None:
    record = SecretRecord(CIPHER, "", T0)
    assert "dags" not in fp_secret(("variable", "X"), record)
    assert fp_secret(("variable", "X"), record) == "secret:" + dg.canonical(
        ("variable", "X", record)
    )
    sim = _sim()
    assert _set(sim, "X").ok
    assert len(sim.state.snapshot()["secrets"][0]) == 5
    assert "dags" not in sim.outbox(OutboxKind.SECRET.value)[-1]


def test_the_gate_refuses_a_restriction_until_release_3() -> None:
    restricted = c.SetSecret(
        request_id="r", now=T0, kind="variable", key="X", ciphertext=CIPHER, dags=("d",)
    )
    plain = c.SetSecret(request_id="r", now=T0, kind="variable", key="X", ciphertext=CIPHER)
    assert refusal(restricted, BASELINE_RELEASE) is not None
    assert refusal(plain, BASELINE_RELEASE) is None
    assert refusal(restricted, RELEASE) is None
    read = sr.ReadSecrets(
        request_id="r",
        now=T0,
        key=task_key(),
        token=1,
        worker_id="w",
        kind="variable",
        names=("X",),
    )
    assert "ReadSecrets" in (refusal(read, BASELINE_RELEASE) or "")


def task_key():  # type: ignore[no-untyped-def]
    from raftsched.core.model import TaskKey

    return TaskKey("d", "r", "a")


def test_an_on_demand_read_records_who_read_which_name_and_no_value() -> None:
    sim = _sim()
    assert _set(sim, "X").ok and _set(sim, "DB", kind="connection").ok
    grant = _leased(sim, "d")
    assert _read(sim, grant, ("X",)).ok
    assert _read(sim, grant, ("DB",), kind="connection").ok
    run_id = grant.lease.key.run_id
    who = f"by task a try 1 (token {grant.lease.token})"
    assert _reads(sim.state) == [
        ("worker w1", "read_variable", "d", f"X {who}"),
        ("worker w1", "read_connection", "d", f"DB {who}"),
    ]
    audited = sim.outbox(OutboxKind.AUDIT.value)
    assert [e["run_id"] for e in audited[-2:]] == [run_id, run_id]
    assert all(CIPHER not in str(e) for e in audited)


def test_a_restricted_name_is_refused_to_another_dag_and_nothing_is_recorded() -> None:
    sim = _sim()
    assert _set(sim, "X", ("e",)).ok and _set(sim, "Y").ok
    grant = _leased(sim, "d")
    before = len(sim.state.audit)
    result = _read(sim, grant, ("Y", "X"))
    assert (result.ok, result.reason) == (False, sr.RESTRICTED)
    assert result.value == "variable X is restricted to DAGs e: DAG d may not read it"
    assert len(sim.state.audit) == before  # all or nothing: Y is not recorded either
    unknown = _read(sim, grant, ("NOPE",))
    assert (unknown.reason, unknown.value) == (sr.UNKNOWN_SECRET, "NOPE")


def test_an_on_demand_read_needs_the_live_lease_of_its_worker() -> None:
    sim = _sim()
    assert _set(sim, "X").ok
    grant = _leased(sim, "d")
    assert _read(sim, grant, ("X",), token=grant.lease.token + 1000).reason == r.STALE_TOKEN
    assert _read(sim, grant, ("X",), worker_id="w2").reason == r.WRONG_WORKER
    late = grant.lease.expires_at + timedelta(seconds=1)
    assert _read(sim, grant, ("X",), now=late).reason == sr.LEASE_EXPIRED
    assert _reads(sim.state) == []
    assert sim.complete(grant, now=at(2)).ok
    assert _read(sim, grant, ("X",), now=at(3)).reason == r.STALE_TOKEN


def test_a_read_is_bounded_before_it_is_applied() -> None:
    key = task_key()
    base = {"request_id": "r", "now": T0, "key": key, "token": 1, "worker_id": "w"}
    too_many = tuple(f"N{i}" for i in range(policy.MAX_NAMES_PER_READ + 1))
    for bad in (
        {"kind": "token", "names": ("X",)},
        {"kind": "variable", "names": ()},
        {"kind": "variable", "names": ("bad-name",)},
        {"kind": "variable", "names": ("X" * 200,)},
        {"kind": "variable", "names": too_many},
        {"kind": "variable", "names": ["X"]},
    ):
        with pytest.raises(LimitExceeded):
            check_command(sr.ReadSecrets(**base, **bad))  # type: ignore[arg-type]
    sim = _sim()
    result = sim.apply(sr.ReadSecrets(**{**base, "request_id": "x"}, kind="v", names=("X",)))
    assert result.reason == r.INVALID  # refused by apply too, nothing changed


def test_a_read_waits_while_the_outbox_is_full(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = _sim()
    assert _set(sim, "X").ok
    grant = _leased(sim, "d")
    monkeypatch.setattr(type(sim.state.outbox), "is_full", lambda self: True)
    assert _read(sim, grant, ("X",)).reason == r.OUTBOX_FULL
    assert _reads(sim.state) == []
