"""End to end: 3 real scheduler nodes, real `raftsched worker` processes, the gRPC API.

- a DAG with dependencies, a retry, a timeout and a failing task runs on a worker; every
  state and log line reaches the DB (SQLite and PostgreSQL);
- kill -9 a worker mid-task: the lease expires, the attempt is retried on another worker, and
  a late Complete with the dead lease's token is refused FAILED_PRECONDITION;
- kill the leader while workers run: no two attempts of one task overlap in time.
"""

from __future__ import annotations

import itertools
import textwrap
from collections import defaultdict
from pathlib import Path

import grpc
import pytest
from api_harness import ApiCluster
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2, worker_pb2
from raftsched.errors import ApiError
from raftsched.store import queries

pytestmark = pytest.mark.slow

S = common_pb2


def _dag_file(body: str) -> str:
    header = """\
        from datetime import datetime, timedelta

        from raftsched import DAG, BashTask

        """
    return textwrap.dedent(header) + textwrap.dedent(body)


MAIN = _dag_file(
    """\
    with DAG("e2e", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        extract = BashTask("extract", command="echo extract-$RAFTSCHED_TRY_NUMBER; echo warn >&2")
        flaky = BashTask(
            "flaky",
            command='echo try-$RAFTSCHED_TRY_NUMBER; [ "$RAFTSCHED_TRY_NUMBER" -ge 2 ] || exit 3',
            retries=1,
            retry_delay=timedelta(seconds=1),
        )
        slow = BashTask(
            "slow", command="echo sleeping; sleep 60", execution_timeout=timedelta(seconds=2)
        )
        doomed = BashTask("doomed", command="echo doomed; exit 7")
        load = BashTask("load", command="echo load-done")
        extract >> [flaky, slow, doomed]
        flaky >> load
    """
)


def _trigger(client, dag_id: str, conf: str = "") -> str:  # type: ignore[no-untyped-def]
    return client.dags.TriggerDag(
        dag_pb2.TriggerDagRequest(dag_id=dag_id, conf_json=conf)
    ).run.run_id


def _log(client, dag_id: str, run_id: str, task_id: str, try_number: int = 0) -> str:  # type: ignore[no-untyped-def]
    request = dag_pb2.GetTaskLogRequest(
        dag_id=dag_id, run_id=run_id, task_id=task_id, try_number=try_number
    )
    return "".join(chunk.text for chunk in client.dags.GetTaskLog(request))


def test_dag_with_retry_timeout_and_failure_runs_on_a_worker(tmp_path: Path, db_url: str) -> None:
    with ApiCluster(tmp_path, db_url, dags={"e2e.py": MAIN}, lease_ttl=5) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"e2e"})
        cluster.start_worker("w1", concurrency=4)
        run_id = _trigger(client, "e2e", '{"who": "test"}')
        # follow the log of the first task while it runs (stream ends when it finished)
        follow = dag_pb2.GetTaskLogRequest(
            dag_id="e2e", run_id=run_id, task_id="extract", follow=True
        )
        followed = "".join(c.text for c in client.dags.GetTaskLog(follow, timeout=60))
        assert "extract-1" in followed and "warn" in followed
        run = cluster.wait_run(client, "e2e", run_id)
        assert run.state == S.RUN_STATE_FAILED  # "doomed" and "slow" are leaves that failed
        cluster.wait_caught_up(timeout=60)

        current = cluster.current(client, "e2e", run_id)
        assert {k: v.state for k, v in current.items()} == {
            "extract": S.TASK_STATE_SUCCESS,
            "flaky": S.TASK_STATE_SUCCESS,
            "slow": S.TASK_STATE_FAILED,
            "doomed": S.TASK_STATE_FAILED,
            "load": S.TASK_STATE_SUCCESS,
        }
        assert current["flaky"].try_number == 2 and current["doomed"].exit_code == 7
        assert "execution_timeout" in current["slow"].message

        # the DB holds every attempt and every log line
        rows = queries.list_task_instances(cluster.engine, "e2e", run_id)
        attempts = {(r.task_id, r.try_number): r.state for r in rows}
        assert attempts == {
            ("doomed", 1): "failed",
            ("extract", 1): "success",
            ("flaky", 1): "failed",
            ("flaky", 2): "success",
            ("load", 1): "success",
            ("slow", 1): "failed",
        }
        assert queries.get_run(cluster.engine, "e2e", run_id).state == "failed"
        assert "try-1" in _log(client, "e2e", run_id, "flaky", 1)
        assert "try-2" in _log(client, "e2e", run_id, "flaky")
        assert "load-done" in _log(client, "e2e", run_id, "load")
        assert "doomed" in _log(client, "e2e", run_id, "doomed")
        db_text = "".join(
            c.text for c in queries.read_log(cluster.engine, "e2e", run_id, "extract", 1)
        )
        assert "extract-1" in db_text and "warn" in db_text
        listed = client.dags.ListRuns(dag_pb2.ListRunsRequest(dag_id="e2e"))
        assert [r.run_id for r in listed.runs] == [run_id]
        cluster.assert_replicas_agree()


KILL = _dag_file(
    """\
    with DAG("victim", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        BashTask(
            "long",
            command="echo started-$RAFTSCHED_TRY_NUMBER; sleep 4; echo finished",
            retries=2,
            retry_delay=timedelta(seconds=0),
        )
    """
)


def test_killed_worker_lease_expires_and_late_complete_is_refused(
    tmp_path: Path, sqlite_url: str
) -> None:
    with ApiCluster(tmp_path, sqlite_url, dags={"kill.py": KILL}, lease_ttl=3) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"victim"})
        doomed = cluster.start_worker("doomed", concurrency=1)
        run_id = _trigger(client, "victim")
        first = cluster.wait_task(
            client, "victim", run_id, "long", lambda ti: ti.state == S.TASK_STATE_RUNNING
        )
        assert first.worker_id == "doomed" and first.try_number == 1
        doomed.kill()
        cluster.start_worker("rescuer", concurrency=1)
        done = cluster.wait_task(
            client, "victim", run_id, "long", lambda ti: ti.state == S.TASK_STATE_SUCCESS
        )
        assert done.worker_id == "rescuer" and done.try_number == 2
        assert done.lease_token > first.lease_token

        key = common_pb2.TaskKey(dag_id="victim", run_id=run_id, task_id="long")
        late = worker_pb2.CompleteRequest(
            worker_id="doomed", key=key, token=first.lease_token, success=True
        )
        with pytest.raises(ApiError) as info:
            client.workers.Complete(late)
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert f"stale fencing token {first.lease_token}" in info.value.message
        logs = worker_pb2.AppendLogsRequest(
            worker_id="doomed",
            key=key,
            token=first.lease_token,
            chunks=[common_pb2.LogText(stream="stdout", text="late")],
        )
        with pytest.raises(ApiError) as info:
            client.workers.AppendLogs(logs)
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION

        cluster.wait_caught_up(timeout=60)
        rows = queries.list_task_instances(cluster.engine, "victim", run_id)
        by_try = {r.try_number: r for r in rows}
        # the worker's task supervisor reports the death at once (worker/_last_words.py); the
        # lease's expiry is the fallback when nothing can report it
        assert by_try[1].state == "failed"
        assert "died while the attempt ran" in by_try[1].message or (
            "lease expired" in by_try[1].message
        )
        assert by_try[2].state == "success" and by_try[2].worker_id == "rescuer"


OVERLAP = _dag_file(
    """\
    LOG = "@LOG@"
    STEP = (
        'echo "$RAFTSCHED_RUN_ID $RAFTSCHED_TASK_ID $RAFTSCHED_TRY_NUMBER start $(date +%s.%N)" >> '
        + LOG + '; sleep 1.5; '
        'echo "$RAFTSCHED_RUN_ID $RAFTSCHED_TASK_ID $RAFTSCHED_TRY_NUMBER end $(date +%s.%N)" >> '
        + LOG
    )
    with DAG("overlap", schedule=None, start_date=datetime(2024, 1, 1), max_active_tasks=64) as dag:
        retry = {"retries": 3, "retry_delay": timedelta(0)}
        first = [BashTask(f"a{i}", command=STEP, **retry) for i in range(4)]
        second = [BashTask(f"b{i}", command=STEP, **retry) for i in range(2)]
        for task in first:
            task >> second
    """
)


def test_leader_killed_while_workers_run_no_attempt_overlaps(
    tmp_path: Path, sqlite_url: str
) -> None:
    record = tmp_path / "attempts.log"
    record.touch()
    dags = {"overlap.py": OVERLAP.replace("@LOG@", str(record))}
    with ApiCluster(tmp_path, sqlite_url, dags=dags, lease_ttl=4) as cluster:
        cluster.start()
        leader = cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"overlap"})
        for name in ("w1", "w2"):
            cluster.start_worker(name, concurrency=3)
        runs = [_trigger(client, "overlap") for _ in range(3)]
        wait_for(
            lambda: record.read_text().count(" start ") >= 3,
            timeout=60,
            what="attempts to start",
        )
        cluster.kill(leader)
        cluster.wait_leader(exclude={leader})
        cluster.start_node(leader)
        for run_id in runs:
            run = cluster.wait_run(client, "overlap", run_id, timeout=120)
            assert run.state == S.RUN_STATE_SUCCESS

        spans: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(dict)
        for line in record.read_text().splitlines():
            run_id, task_id, try_number, _what, stamp = line.split()
            spans[(run_id, task_id)].setdefault(try_number, []).append(float(stamp))
        assert len(spans) == 3 * 6
        for task, tries in spans.items():
            intervals = sorted(
                (v[0], v[-1] if len(v) > 1 else float("inf")) for v in tries.values()
            )
            for (_, end), (start, _) in itertools.pairwise(intervals):
                assert end <= start, f"attempts of {task} overlap: {tries}"
        cluster.wait_caught_up(timeout=60)
        cluster.assert_replicas_agree()
