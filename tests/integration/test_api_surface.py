"""The gRPC API of a real 3-node cluster: health, reflection, auth, validation, reads, users,
status across nodes, and UNAVAILABLE without a quorum. One cluster for the whole module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from api_harness import ADMIN, OPERATOR, VIEWER, ApiCluster
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from harness import child_env, wait_for

from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2, user_pb2
from raftsched.core.model import utc_iso
from raftsched.errors import ApiError, NoQuorumError

pytestmark = pytest.mark.slow

DAG = textwrap.dedent(
    """\
    from datetime import datetime

    from raftsched import DAG, BashTask

    with DAG("surface", schedule="@daily", start_date=datetime(2024, 1, 1),
             catchup=False, tags=["api", "test"], description="API surface") as dag:
        BashTask("a", command="echo a") >> BashTask("b", command="echo b")

    with DAG("other", schedule=None, start_date=datetime(2024, 1, 1)) as other:
        BashTask("x", command="true")
    """
)
BROKEN = "raise RuntimeError('this file is broken on purpose')\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiCluster]:
    workdir = tmp_path_factory.mktemp("api-surface")
    url = f"sqlite:///{workdir / 'raftsched.db'}"
    with ApiCluster(workdir, url, dags={"surface.py": DAG, "broken.py": BROKEN}) as c:
        c.start()
        c.wait_leader()
        c.wait_dags(c.client(), {"surface", "other"})
        yield c


def _code(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(ApiError) as info:
        call()  # type: ignore[operator]
    return info.value.code, info.value.message


def test_health_and_reflection(cluster: ApiCluster) -> None:
    address = cluster.api_addresses[1]
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        wait_for(
            lambda: (
                health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            ),
            timeout=20,
            what="health SERVING",
        )
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        assert {"raftsched.v1.DagService", "raftsched.v1.WorkerService"} <= services
        pool = descriptor_pool.DescriptorPool(db)
        method = pool.FindServiceByName("raftsched.v1.DagService").FindMethodByName("ListRuns")
        assert method.input_type.full_name == "raftsched.v1.ListRunsRequest"


def test_auth(cluster: ApiCluster) -> None:
    anonymous = cluster.client(token=None)
    code, message = _code(lambda: anonymous.dags.ListDags(dag_pb2.ListDagsRequest()))
    assert code is grpc.StatusCode.UNAUTHENTICATED and "token" in message
    viewer = cluster.client(token=VIEWER)
    assert viewer.dags.ListDags(dag_pb2.ListDagsRequest()).dags
    code, message = _code(lambda: viewer.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="surface")))
    assert code is grpc.StatusCode.PERMISSION_DENIED and "operator" in message
    operator = cluster.client(token=OPERATOR)
    code, _ = _code(lambda: operator.users.ListUsers(user_pb2.ListUsersRequest()))
    assert code is grpc.StatusCode.PERMISSION_DENIED


def test_validation(cluster: ApiCluster) -> None:
    client = cluster.client(token=OPERATOR)
    dags = client.dags
    cases = [
        (lambda: dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="")), "dag_id"),
        (
            lambda: dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="surface", conf_json="{")),
            "conf_json",
        ),
        (
            lambda: dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="surface", conf_json="[1]")),
            "JSON object",
        ),
        (
            lambda: dags.TriggerDag(
                dag_pb2.TriggerDagRequest(
                    dag_id="surface", conf_json='{"k": "' + "x" * 70000 + '"}'
                )
            ),
            "max_conf_bytes",
        ),
        (lambda: dags.ListRuns(dag_pb2.ListRunsRequest(states=[42])), "states[0]"),
        (lambda: dags.ListRuns(dag_pb2.ListRunsRequest(page_size=5000)), "page_size"),
        (lambda: dags.ListRuns(dag_pb2.ListRunsRequest(page_token="garbage")), "page_token"),
        (lambda: dags.ListDags(dag_pb2.ListDagsRequest(recent_runs=1000)), "recent_runs"),
        (
            lambda: dags.MarkTasks(
                dag_pb2.MarkTasksRequest(
                    dag_id="surface", run_id="r", task_ids=["a"], state=common_pb2.TASK_STATE_QUEUED
                )
            ),
            "state",
        ),
    ]
    for call, field in cases:
        code, message = _code(call)
        assert code is grpc.StatusCode.INVALID_ARGUMENT, (field, code, message)
        assert field in message, (field, message)
    code, message = _code(lambda: dags.GetDag(dag_pb2.GetDagRequest(dag_id="nope")))
    assert code is grpc.StatusCode.NOT_FOUND and "nope" in message


def test_dags_runs_and_history(cluster: ApiCluster) -> None:
    client = cluster.client(token=OPERATOR)
    listed = client.dags.ListDags(dag_pb2.ListDagsRequest(search="SURF", tags=["api"]))
    assert [d.dag_id for d in listed.dags] == ["surface"] and listed.total_size == 1
    dag = listed.dags[0]
    assert dag.HasField("next_run") and dag.task_count == 2 and not dag.paused
    assert listed.freshness.node_id and listed.freshness.applied_index > 0
    page = client.dags.ListDags(dag_pb2.ListDagsRequest(page_size=1))
    assert page.next_page_token == "other" and page.total_size == 2
    rest = client.dags.ListDags(dag_pb2.ListDagsRequest(page_size=1, page_token="other"))
    assert [d.dag_id for d in rest.dags] == ["surface"] and not rest.next_page_token

    shown = client.dags.GetDag(dag_pb2.GetDagRequest(dag_id="surface"))
    assert [t.task_id for t in shown.tasks] == ["a", "b"] and shown.tasks[1].upstream == ["a"]

    paused = client.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="other"))
    assert paused.changed and paused.dag.paused
    again = client.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="other"))
    assert not again.changed

    date = datetime(2030, 1, 2, tzinfo=UTC)
    request = dag_pb2.TriggerDagRequest(dag_id="other", conf_json='{"n": 1}', request_id="trig-1")
    request.logical_date.FromDatetime(date)
    run = client.dags.TriggerDag(request).run
    assert run.run_type == common_pb2.RUN_TYPE_MANUAL and run.conf_json == '{"n":1}'
    assert client.dags.TriggerDag(request).run.run_id == run.run_id  # same request id: same run
    duplicate = dag_pb2.TriggerDagRequest(dag_id="other")
    duplicate.logical_date.FromDatetime(date)
    code, _ = _code(lambda: client.dags.TriggerDag(duplicate))
    assert code is grpc.StatusCode.ALREADY_EXISTS
    for i in range(3):
        more = dag_pb2.TriggerDagRequest(dag_id="other")
        more.logical_date.FromDatetime(date - timedelta(days=i + 1))
        client.dags.TriggerDag(more)
    runs = client.dags.ListRuns(dag_pb2.ListRunsRequest(dag_id="other", page_size=3))
    assert [r.logical_date.ToDatetime(tzinfo=UTC) for r in runs.runs] == [
        date - timedelta(days=i) for i in range(3)
    ]
    tail = client.dags.ListRuns(
        dag_pb2.ListRunsRequest(dag_id="other", page_size=3, page_token=runs.next_page_token)
    )
    assert len(tail.runs) == 1 and not tail.next_page_token
    tis = client.dags.ListTaskInstances(
        dag_pb2.ListTaskInstancesRequest(dag_id="other", run_id=run.run_id)
    )
    assert [t.key.task_id for t in tis.task_instances] == ["x"]
    marked = client.dags.MarkTasks(
        dag_pb2.MarkTasksRequest(
            dag_id="other", run_id=run.run_id, task_ids=["x"], state=common_pb2.TASK_STATE_FAILED
        )
    )
    assert list(marked.marked_task_ids) == ["x"]
    cleared = client.dags.ClearTasks(dag_pb2.ClearTasksRequest(dag_id="other", run_id=run.run_id))
    assert list(cleared.cleared_task_ids) == ["x"]
    code, message = _code(
        lambda: client.dags.ClearTasks(
            dag_pb2.ClearTasksRequest(dag_id="other", run_id=run.run_id, task_ids=["zz"])
        )
    )
    assert code is grpc.StatusCode.NOT_FOUND and "zz" in message

    # the DB is the history: the run reaches it, and the DB check refuses its date
    wait_for(
        lambda: any(r[2] == run.run_id for r in cluster.runs()),
        timeout=30,
        what="the manual run in the DB",
    )
    errors = client.dags.ListImportErrors(dag_pb2.ListImportErrorsRequest())
    assert any("broken.py" in e.fileloc for e in errors.import_errors)


def test_users(cluster: ApiCluster) -> None:
    users = cluster.client(token=ADMIN).users
    created = users.CreateUser(
        user_pb2.CreateUserRequest(username="ada", password="correct horse", role="operator")
    )
    assert created.username == "ada" and created.role == "operator"
    code, _ = _code(
        lambda: users.CreateUser(
            user_pb2.CreateUserRequest(username="ada", password="another one", role="viewer")
        )
    )
    assert code is grpc.StatusCode.ALREADY_EXISTS
    code, message = _code(
        lambda: users.CreateUser(
            user_pb2.CreateUserRequest(username="bad name", password="long enough", role="viewer")
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "username" in message
    code, message = _code(
        lambda: users.CreateUser(
            user_pb2.CreateUserRequest(username="bob", password="short", role="viewer")
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "password" in message
    ok = users.VerifyUser(user_pb2.VerifyUserRequest(username="ada", password="correct horse"))
    assert ok.ok and ok.role == "operator"
    for name, password in (("ada", "wrong password"), ("nobody", "correct horse")):
        answer = users.VerifyUser(user_pb2.VerifyUserRequest(username=name, password=password))
        assert not answer.ok and not answer.role
    assert [u.username for u in users.ListUsers(user_pb2.ListUsersRequest()).users] == ["ada"]
    assert users.DeleteUser(user_pb2.DeleteUserRequest(username="ada")).deleted
    assert not users.DeleteUser(user_pb2.DeleteUserRequest(username="ada")).deleted


def _backfill_request(
    dag_id: str, start: datetime | None, end: datetime | None, **fields: object
) -> dag_pb2.BackfillDagRequest:
    request = dag_pb2.BackfillDagRequest(dag_id=dag_id, **fields)  # type: ignore[arg-type]
    if start is not None:
        request.start_date.FromDatetime(start)
    if end is not None:
        request.end_date.FromDatetime(end)
    return request


def test_backfill(cluster: ApiCluster) -> None:
    """`surface` is @daily without catch-up: the scheduler made only its latest slot's run."""
    client = cluster.client(token=OPERATOR)
    day = timedelta(days=1)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    end = start + 3 * day
    expected = [f"backfill__{utc_iso(start + i * day)}" for i in range(4)]

    dry = client.dags.BackfillDag(_backfill_request("surface", start, end, dry_run=True))
    assert [r.run_id for r in dry.runs] == expected and not dry.skipped
    assert all(r.state == common_pb2.RUN_STATE_UNSPECIFIED for r in dry.runs)
    listed = client.dags.ListRuns(dag_pb2.ListRunsRequest(dag_id="surface"))
    assert not any(r.run_id.startswith("backfill__") for r in listed.runs)  # nothing made

    done = client.dags.BackfillDag(_backfill_request("surface", start, end, conf_json='{"k": 1}'))
    assert [r.run_id for r in done.runs] == expected and not done.skipped
    first = done.runs[0]
    assert first.run_type == common_pb2.RUN_TYPE_MANUAL and first.conf_json == '{"k":1}'
    assert first.data_interval_start.ToDatetime(tzinfo=UTC) == start - day
    assert first.data_interval_end.ToDatetime(tzinfo=UTC) == start

    # the CLI, repeating it: nothing new, every slot reported as taken
    argv = ["dags", "backfill", "surface", "-s", "2024-01-01", "-e", "2024-01-04T00:00:00Z"]
    again = _cli(cluster, *argv, "--output", "json")
    assert again.returncode == 0, again.stderr
    payload = json.loads(again.stdout)
    assert payload["runs"] == [] and len(payload["skipped"]) == 4

    # up to now: every slot of the range gets exactly one run, the scheduler's included
    now = datetime.now(UTC)
    recent = now.replace(hour=0, minute=0, second=0, microsecond=0) - 30 * day
    wide = client.dags.BackfillDag(_backfill_request("surface", recent, now))
    slots = [recent + i * day for i in range(31)]
    got = sorted(
        [r.logical_date.ToDatetime(tzinfo=UTC) for r in wide.runs]
        + [s.ToDatetime(tzinfo=UTC) for s in wide.skipped]
    )
    assert got == slots and len(wide.skipped) >= 1  # the scheduler's latest slot
    wanted = {*slots, *(start + i * day for i in range(4))}

    def all_in_db() -> bool:
        return wanted <= set(cluster.run_dates().get("surface", []))

    wait_for(all_in_db, timeout=60, what="backfilled runs in the DB")
    dates = cluster.run_dates()["surface"]
    assert len(dates) == len(set(dates))  # one run per slot

    # refusals, each with what to do
    code, message = _code(lambda: client.dags.BackfillDag(_backfill_request("other", start, end)))
    assert code is grpc.StatusCode.FAILED_PRECONDITION and "dags trigger" in message
    code, message = _code(
        lambda: client.dags.BackfillDag(_backfill_request("surface", start, now + day))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "end_date" in message
    code, message = _code(lambda: client.dags.BackfillDag(_backfill_request("surface", end, start)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "end_date" in message
    code, message = _code(lambda: client.dags.BackfillDag(_backfill_request("surface", None, end)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "start_date" in message
    code, message = _code(  # the DAG starts on 2024-01-01: over 1000 daily slots since
        lambda: client.dags.BackfillDag(_backfill_request("surface", start, now))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "in parts" in message
    code, _ = _code(lambda: client.dags.BackfillDag(_backfill_request("nope", start, end)))
    assert code is grpc.StatusCode.NOT_FOUND
    viewer = cluster.client(token=VIEWER)
    code, _ = _code(lambda: viewer.dags.BackfillDag(_backfill_request("surface", start, end)))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    unknown = _cli(cluster, "dags", "backfill", "nope", "-s", "2024-01-01", "-e", "2024-01-02")
    assert unknown.returncode == 1 and "dags list" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    backwards = _cli(cluster, "dags", "backfill", "surface", "-s", "2024-01-02", "-e", "2024-01-01")
    assert backwards.returncode == 2 and "before --start-date" in backwards.stderr


def _cli(cluster: ApiCluster, *args: str) -> subprocess.CompletedProcess[str]:
    servers = ",".join(cluster.api_addresses)
    return subprocess.run(
        [sys.executable, "-m", "raftsched", *args, "--server", servers, "--token", OPERATOR],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )


def test_status_then_no_quorum(cluster: ApiCluster, tmp_path: Path) -> None:
    """Last in the module: it kills two nodes."""
    client = cluster.client(token=VIEWER)
    cluster.wait_caught_up(timeout=30, outbox=False)
    status = client.cluster.GetStatus(cluster_pb2.GetStatusRequest())
    assert sorted(n.address for n in status.nodes) == sorted(cluster.addresses)
    roles = sorted(n.role for n in status.nodes)
    assert roles.count(cluster_pb2.NODE_ROLE_LEADER) == 1
    assert all(n.digest and n.api_address for n in status.nodes)
    leader = next(n for n in status.nodes if n.role == cluster_pb2.NODE_ROLE_LEADER)
    assert leader.HasField("db_watermark") and leader.db_ok

    survivor = 0
    for index in (1, 2):
        cluster.kill(index)
    only = cluster.client(token=OPERATOR, nodes=[survivor], deadline=8.0)
    status = only.cluster.GetStatus(cluster_pb2.GetStatusRequest())
    unreachable = [n for n in status.nodes if n.role == cluster_pb2.NODE_ROLE_UNREACHABLE]
    assert len(unreachable) == 2 and all(n.error for n in unreachable)

    def not_serving() -> bool:
        with grpc.insecure_channel(cluster.api_addresses[survivor]) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
        return answer.status == health_pb2.HealthCheckResponse.NOT_SERVING

    wait_for(not_serving, timeout=10, what="health NOT_SERVING without a quorum")
    with pytest.raises(NoQuorumError) as info:
        only.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="surface"))
    assert "no quorum" in str(info.value)
