"""Variables, connections and callback jobs leave apply as outbox entries (core.persisted),
only once the cluster version is release 3 (0.3.0, which introduced them) or newer, with every
record held at that moment; the DB gets ciphertext exactly as the log holds it, never a
value."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from raftsched import secrets as sx
from raftsched.core import commands as c
from raftsched.core import persisted
from raftsched.core.model import OutboxKind
from tests.unit.test_state_harness import Sim, at, dag, task

KEY = Fernet.generate_key().decode()
BOX = sx.SecretBox([KEY])
NOTIFY = ("failure", "notify", "{}")


def _entries(sim: Sim, kind: OutboxKind, after: int = 0) -> list[dict]:
    return [e.data for e in sim.state.outbox_after(after, 10_000) if e.kind is kind]


def _set(sim: Sim, key: str, value: str, kind: str = "variable") -> str:
    token = BOX.encrypt(value)
    cmd = c.SetSecret(request_id=sim.rid(), now=at(1), kind=kind, key=key, ciphertext=token)
    assert sim.apply(cmd).ok
    return token


def test_entries_are_release_3s() -> None:
    assert persisted.SINCE_RELEASE == 3
    assert [persisted.persists_at(v) for v in (1, 2, 3, 4)] == [False, False, True, True]


@pytest.mark.parametrize("steps", [(2, 3), (3,)], ids=["from-0.2.0", "fresh-cluster"])
def test_secrets_and_jobs_reach_the_outbox_once_the_cluster_runs_release_3(steps) -> None:  # type: ignore[no-untyped-def]
    sim = Sim()
    assert sim.register(dag("d", task("a", callbacks=(NOTIFY,)))).ok
    sim.create("d")
    var = _set(sim, "MY_VAR", "clear-var")
    conn = _set(sim, "wh", "postgresql://u:clear-pw@h/db", kind="connection")
    sim.run_task("a", success=False)  # makes one pending callback job
    # cluster version 1 (and 2): a release-2 node applies these without entries, so this one
    # must too
    assert _entries(sim, OutboxKind.SECRET) == [] == _entries(sim, OutboxKind.CALLBACK_JOB)
    last = sim.state.outbox_last_seq
    for version in steps[:-1]:  # a cluster of 0.2.0 nodes finalized at 2: still none
        assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(2), version=version)).ok
        assert _entries(sim, OutboxKind.SECRET) == [] == _entries(sim, OutboxKind.CALLBACK_JOB)
        _set(sim, "OTHER", "clear-other")
        assert _entries(sim, OutboxKind.SECRET) == []
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(2), version=steps[-1])).ok
    secrets = _entries(sim, OutboxKind.SECRET, last)
    assert [(s["kind"], s["key"], s["ciphertext"]) for s in secrets if s["key"] != "OTHER"] == [
        ("variable", "MY_VAR", var),
        ("connection", "wh", conn),
    ]
    assert len(secrets) == 2 + (len(steps) > 1)  # OTHER, set at cluster version 2, too
    [job] = _entries(sim, OutboxKind.CALLBACK_JOB, last)
    assert job["state"] == "pending" and job["dag_id"] == "d" and job["job"][0] == job["job_id"]

    last = sim.state.outbox_last_seq
    lease = c.LeaseCallbacks(
        request_id=sim.rid(), now=at(3), worker_id="w1", max_jobs=5, lease_ttl_seconds=60.0
    )
    [grant] = sim.apply(lease).value
    done = c.CompleteCallback(
        request_id=sim.rid(),
        now=at(4),
        worker_id="w1",
        job_id=grant["job_id"],
        token=grant["token"],
        success=True,
    )
    assert sim.apply(done).ok
    newer = _set(sim, "MY_VAR", "clear-var-2")
    assert sim.apply(
        c.DeleteSecret(request_id=sim.rid(), now=at(5), kind="connection", key="wh")
    ).ok
    jobs = _entries(sim, OutboxKind.CALLBACK_JOB, last)
    assert [j["state"] for j in jobs] == ["running", "success"]
    secrets = _entries(sim, OutboxKind.SECRET, last)
    assert [(s["key"], s["ciphertext"]) for s in secrets] == [("MY_VAR", newer), ("wh", None)]
    every = repr([e.data for e in sim.state.outbox_after(0, 10_000)])
    assert "clear-" not in every  # ciphertext only, as in the log
    assert sim.state.recompute_digest() == sim.state.digest()
