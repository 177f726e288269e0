"""Issue #10: every journal lost, the DB rebuilds the cluster (SQLite and PostgreSQL).

A real 3-node cluster with a real worker runs a catch-up DAG with a 1-second schedule and a
slow task for a while. Then every node is killed (kill -9) and every journal and snapshot is
deleted. Started like that, the new leader sees the DB ahead of its log and refuses to
materialize or schedule, saying which command repairs it. After
``raftsched cluster rebuild --from-db`` the nodes start from the DB's history and run on:
the DB must hold exactly one run per slot (none twice, none skipped), every lease granted
after the rebuild carries a token above every token from before, and a completion with the
slow task's old token is refused (its attempt was closed as lost and retried).

Run with ``-s`` to see the counts.

A second test checks what lived only in the Raft state before: a variable, a
connection and a pending callback job survive the same loss and rebuild, the values never
in the DB in clear text.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from api_harness import WORKER, ApiCluster
from cryptography.fernet import Fernet
from harness import (
    StatusRecorder,
    child_env,
    every_second_dag,
    second_slots,
    utcnow,
    wait_for,
    wait_for_slots,
)
from harness import whole_second as whole

from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2, worker_pb2
from raftsched.core.versions import RELEASE
from raftsched.errors import ApiError
from raftsched.store import tables as t
from raftsched.store.rebuild import INDEX_MARGIN, LOST_MESSAGE

pytestmark = pytest.mark.slow

SLOW = textwrap.dedent(
    """\
    from raftsched import DAG, BashTask

    with DAG("slow", schedule=None, catchup=False) as dag:
        BashTask("sleep", command="sleep 600", retries=0)
    """
)


def _tokens(engine: sa.Engine) -> list[tuple[str, str, str, int, int, str, str]]:
    ti = t.task_instance
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                ti.c.dag_id,
                ti.c.run_id,
                ti.c.task_id,
                ti.c.try_number,
                ti.c.lease_token,
                ti.c.state,
                ti.c.message,
            )
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _wipe_raft_files(data_dir: Path) -> int:
    gone = 0
    for path in data_dir.rglob("raft.*"):
        if path.is_file():
            path.unlink()
            gone += 1
    for path in data_dir.rglob("pre-rebuild-*"):
        shutil.rmtree(path, ignore_errors=True)
    return gone


def test_rebuild_from_db_after_every_journal_is_lost(tmp_path: Path, db_url: str) -> None:
    now = whole(utcnow())
    start, end = now - timedelta(seconds=5), now + timedelta(seconds=45)
    dags = {
        "every_second.py": every_second_dag("every_second", start=start, end=end),
        "slow.py": SLOW,
    }
    with ApiCluster(tmp_path, db_url, dags=dags, lease_ttl=5) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        client = cluster.client()
        cluster.wait_dags(client, {"every_second", "slow"})
        cluster.start_worker("w1", concurrency=4)
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="slow")).run.run_id
        slow = cluster.wait_task(
            client, "slow", run_id, "sleep", lambda ti: ti.state == common_pb2.TASK_STATE_RUNNING
        )
        old_token = int(slow.lease_token)
        wait_for(
            lambda: len(cluster.runs()) >= 12,
            timeout=60,
            what="a while of runs",
            describe=cluster.brief,
        )
        cluster.wait_caught_up(timeout=30)  # the slow attempt's RUNNING row is in the DB

        # -- power cut: every node, every journal ----------------------------------------
        for index in range(3):
            cluster.kill(index)
        runs_before = len(cluster.runs())
        before = _tokens(cluster.engine)
        max_before = max(r[4] for r in before if r[4] is not None)
        wiped = _wipe_raft_files(cluster.data_dir)

        # Started from nothing, the cluster must refuse: the DB is ahead of the log.
        for index in range(3):
            cluster.start_node(index)
        leader = cluster.wait_leader(timeout=60)
        status = wait_for(
            lambda: (s := cluster.status(leader)) and s.get("db_log_mismatch") and s,
            timeout=30,
            what="the leader to report the DB/log mismatch",
            describe=cluster.brief,
        )
        assert "raftsched cluster rebuild --from-db" in status["materializer_error"]
        time.sleep(3)
        assert len(cluster.runs()) == runs_before, "a refusing leader created runs"
        refused_error = status["materializer_error"]
        for index in range(3):
            cluster.stop_node(index)

        # -- rebuild ---------------------------------------------------------------------
        done = subprocess.run(
            [
                sys.executable,
                *("-m", "raftsched", "--config", str(cluster.config_path)),
                *("cluster", "rebuild", "--from-db"),
            ],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=120,
            check=False,
        )
        print(done.stdout, done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
        # Digest indexes of the refused history meant another state: compare from here on.
        cluster.recorder.stop()
        cluster.recorder = StatusRecorder(cluster.nodes)
        cluster.recorder.start()
        for index in range(3):
            cluster.start_node(index)
        cluster.wait_leader(timeout=60)

        # -- it runs on: every slot once, none skipped -----------------------------------
        expected = {"every_second": second_slots(start, end), "slow": []}
        actual_now = cluster.run_dates()
        expected["slow"] = actual_now.get("slow", [])
        wait_for_slots(cluster, expected, timeout=120)

        # The slow task's old attempt is closed as lost; its retry holds a new-epoch token.
        retry = cluster.wait_task(
            client,
            "slow",
            run_id,
            "sleep",
            lambda ti: ti.try_number >= 2 and ti.state == common_pb2.TASK_STATE_RUNNING,
            timeout=60,
        )
        assert int(retry.lease_token) > max_before + INDEX_MARGIN - 1
        key = common_pb2.TaskKey(dag_id="slow", run_id=run_id, task_id="sleep")
        late = worker_pb2.CompleteRequest(worker_id="w1", key=key, token=old_token, success=True)
        with pytest.raises(ApiError) as info:
            client.workers.Complete(late)
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
        heartbeat = worker_pb2.HeartbeatRequest(
            worker_id="w1", leases=[worker_pb2.LeaseRef(key=key, token=old_token)]
        )
        verdicts = client.workers.Heartbeat(heartbeat).leases
        assert len(verdicts) == 1 and not verdicts[0].ok

        cluster.wait_caught_up(timeout=60)
        after = _tokens(cluster.engine)
        old_keys = {r[:4] for r in before}
        new_tokens = [r[4] for r in after if r[:4] not in old_keys and r[4] is not None]
        between = [tok for tok in new_tokens if max_before < tok <= max_before + INDEX_MARGIN]
        assert new_tokens and not between, (max_before, sorted(new_tokens)[:5])
        assert min(new_tokens) > max_before
        lost = [r for r in after if r[0] == "slow" and r[3] == 1]
        assert lost and lost[0][5] == "failed" and lost[0][6] == LOST_MESSAGE
        cluster.assert_replicas_agree()

        dates = cluster.run_dates()["every_second"]
        print(
            f"\n[rebuild {db_url.split(':')[0]}] slots expected={len(expected['every_second'])}"
            f" runs={len(dates)} duplicates={len(dates) - len(set(dates))}"
            f" missing={len(set(expected['every_second']) - set(dates))};"
            f" runs before the cut={runs_before}; raft files deleted={wiped};"
            f" attempts before={len(before)} after={len(after)};"
            f" max token before={max_before}, new tokens={len(new_tokens)}"
            f" (min {min(new_tokens)}); old token {old_token} refused;"
            f" refused before rebuild: {refused_error[:90]}..."
        )


CALLBACK = textwrap.dedent(
    """\
    from raftsched import DAG, BashTask


    def tell(context):
        print("failed:", context["task_id"])


    with DAG("cb", schedule=None, catchup=False):
        BashTask("fail", command="exit 3", retries=0, on_failure_callback=tell)
    """
)
VAR_VALUE = "var-value-7f3a"
CONN_URI = "postgresql://etl:conn-pw-91c2@db.example:5432/warehouse"


def _rebuild(cluster: ApiCluster) -> None:
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "raftsched", "--config", str(cluster.config_path)),
            *("cluster", "rebuild", "--from-db"),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        check=False,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "secrets=2" in done.stdout and "callbacks_open=1" in done.stdout


def _lease_callbacks(client, worker_id: str) -> list:  # type: ignore[no-untyped-def]
    """The jobs a LeaseCallbacks grants; [] while the call is refused (a cluster that has
    not finalized its version yet refuses it) or nothing is leasable."""
    request = worker_pb2.LeaseCallbacksRequest(
        worker_id=worker_id, max_jobs=5, wait_seconds=0, lease_ttl_seconds=60
    )
    try:
        return list(client.workers.LeaseCallbacks(request).jobs)
    except ApiError:
        return []


def _wait_finalized(cluster: ApiCluster) -> None:
    """Secrets and callback jobs reach the DB from cluster version 3 on (core/persisted.py):
    the leader raises it about a second after it was elected, and then emits all held."""
    wait_for(
        lambda: all(
            (st or {}).get("cluster_version") == RELEASE for st in cluster.statuses().values()
        ),
        timeout=30,
        what="the cluster version raised",
        describe=cluster.brief,
    )


def test_rebuild_keeps_variables_connections_and_pending_callbacks(
    tmp_path: Path, db_url: str
) -> None:
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    with ApiCluster(tmp_path, db_url, dags={"cb.py": CALLBACK}, config=config) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        client = cluster.client()
        worker = cluster.client(WORKER)
        cluster.wait_dags(client, {"cb"})
        set_secret = client.secrets.SetSecret
        set_secret(secret_pb2.SetSecretRequest(kind="variable", key="MY_VAR", value=VAR_VALUE))
        _wait_finalized(cluster)  # a connection restricted to DAGs needs release 3
        set_secret(
            secret_pb2.SetSecretRequest(kind="connection", key="wh", value=CONN_URI, dags=["cb"])
        )
        # No worker runs: the test leases the task and fails it, so its callback stays pending.
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="cb")).run.run_id
        lease = worker_pb2.LeaseRequest(
            worker_id="t1", max_tasks=1, wait_seconds=5, lease_ttl_seconds=30
        )
        [granted] = wait_for(
            lambda: list(worker.workers.Lease(lease).leases),
            timeout=30,
            what="the failing task's lease",
            describe=cluster.brief,
        )
        failed = worker_pb2.CompleteRequest(
            worker_id="t1", key=granted.key, token=granted.token, success=False, exit_code=3
        )
        worker.workers.Complete(failed)
        _wait_finalized(cluster)
        cluster.wait_caught_up(timeout=30)
        with cluster.engine.connect() as conn:
            stored = conn.execute(sa.select(t.secret)).all()
            jobs = conn.execute(sa.select(t.callback_job.c.job_id, t.callback_job.c.state)).all()
        assert sorted((row.key, row.dags) for row in stored) == [("MY_VAR", ""), ("wh", "cb")]
        assert VAR_VALUE not in repr(stored) and "conn-pw-91c2" not in repr(stored)
        [(job_id, state)] = jobs
        assert state == "pending" and job_id.startswith(f"cb/{run_id}/fail/")

        # -- every journal lost, then the rebuild ---------------------------------------
        for index in range(3):
            cluster.kill(index)
        _wipe_raft_files(cluster.data_dir)
        _rebuild(cluster)
        cluster.recorder.stop()
        cluster.recorder = StatusRecorder(cluster.nodes)
        cluster.recorder.start()
        for index in range(3):
            cluster.start_node(index)
        cluster.wait_leader(timeout=60)

        def reveal(kind: str, key: str) -> str:
            request = secret_pb2.GetSecretRequest(kind=kind, key=key, reveal=True)
            return client.secrets.GetSecret(request).value

        assert reveal("variable", "MY_VAR") == VAR_VALUE
        assert reveal("connection", "wh") == CONN_URI
        get_wh = secret_pb2.GetSecretRequest(kind="connection", key="wh")
        assert list(client.secrets.GetSecret(get_wh).dags) == ["cb"]  # secret.dags, 0010
        [job] = wait_for(
            lambda: _lease_callbacks(worker, "t2"),
            timeout=60,
            what="the pending callback job to be leased after the rebuild",
            describe=cluster.brief,
        )
        assert job.job_id == job_id and job.callable == "tell" and job.event == "failure"
        _wait_finalized(cluster)  # the rebuilt state starts at cluster version 1, too
        cluster.wait_caught_up(timeout=30)
        with cluster.engine.connect() as conn:
            after = conn.execute(
                sa.select(t.callback_job.c.state).where(t.callback_job.c.job_id == job_id)
            ).scalar_one()
        assert after == "running"  # the new cluster writes it on, too
        cluster.assert_replicas_agree()
