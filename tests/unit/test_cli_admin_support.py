"""Canned servicers and a real in-process gRPC server for the admin CLI tests.

``fake_cluster(tmp_path)`` starts one server (``raftsched.api.server.build_server``, with the
real auth interceptor and these tokens) serving ClusterService, DagService and UserService
from canned data, and yields a :class:`FakeCluster` whose ``argv(*words, token=...)`` builds a
command line aimed at it. No test lives here.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from raftsched.api.gen import (
    cluster_pb2,
    cluster_pb2_grpc,
    common_pb2,
    dag_pb2,
    dag_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
)
from raftsched.api.server import build_server
from raftsched.config import default_config

TOKENS = {"admin": "adm-secret-1", "operator": "op-secret-2", "viewer": "view-secret-3"}
FRESH = common_pb2.Freshness(leader_id="127.0.0.1:7101", applied_index=42, node_id="127.0.0.1:7101")
C = grpc.StatusCode


def ts(text: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromisoformat(text).astimezone(UTC))
    return stamp


def dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(self) -> None:
        self.members = ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
        self.has_leader = True

    def GetStatus(self, request, context):
        leader_role = cluster_pb2.NODE_ROLE_LEADER if self.has_leader else 3
        nodes = [
            cluster_pb2.NodeStatus(
                node_id="127.0.0.1:7101",
                address="127.0.0.1:7101",
                api_address="127.0.0.1:7301",
                role=leader_role,
                term=4,
                commit_index=42,
                applied_index=42,
                digest="ab" * 32,
                digest_index=40,
                outbox_backlog=3,
                db_watermark=39,
                db_ok=True,
                has_quorum=self.has_leader,
            ),
            cluster_pb2.NodeStatus(
                node_id="127.0.0.1:7102",
                address="127.0.0.1:7102",
                api_address="127.0.0.1:7302",
                role=cluster_pb2.NODE_ROLE_FOLLOWER,
                term=4,
                commit_index=42,
                applied_index=40,
                lag=2,
                digest="ab" * 32,
                digest_index=40,
                has_quorum=True,
                backpressure=True,
            ),
            cluster_pb2.NodeStatus(
                node_id="127.0.0.1:7103",
                address="127.0.0.1:7103",
                role=cluster_pb2.NODE_ROLE_UNREACHABLE,
                error="connection refused",
            ),
        ]
        return cluster_pb2.GetStatusResponse(nodes=nodes, freshness=FRESH)

    def TransferLeadership(self, request, context):
        return cluster_pb2.TransferLeadershipResponse(
            leader_id=request.target or "127.0.0.1:7102", freshness=FRESH
        )

    def AddNode(self, request, context):
        self.members.append(request.address)
        return cluster_pb2.MembershipResponse(nodes=self.members, freshness=FRESH)

    def RemoveNode(self, request, context):
        if request.address not in self.members:
            context.abort(C.NOT_FOUND, f"{request.address} is not a member")
        self.members.remove(request.address)
        return cluster_pb2.MembershipResponse(nodes=self.members, freshness=FRESH)


def _dag(dag_id: str, *, paused: bool = False) -> dag_pb2.Dag:
    return dag_pb2.Dag(
        dag_id=dag_id,
        fileloc=f"/dags/{dag_id}.py",
        description=f"the {dag_id} DAG",
        tags=["team-a"],
        schedule=dag_pb2.Schedule(kind="cron", cron="0 0 * * *", display="@daily"),
        timezone="Europe/Paris",
        catchup=True,
        max_active_runs=1,
        paused=paused,
        active=True,
        spec_hash="f" * 40,
        next_run=dag_pb2.NextRun(logical_date=ts("2024-01-02T00:00:00+00:00")),
        recent_runs=[
            dag_pb2.RunSummary(
                run_id="scheduled__2024-01-01",
                state=common_pb2.RUN_STATE_SUCCESS,
                logical_date=ts("2024-01-01T00:00:00+00:00"),
            )
        ],
        task_count=2,
    )


def _run(dag_id: str, run_id: str, day: int, state: int = 3) -> dag_pb2.DagRun:
    return dag_pb2.DagRun(
        dag_id=dag_id,
        run_id=run_id,
        logical_date=ts(f"2024-01-{day:02d}T00:00:00+00:00"),
        run_type=common_pb2.RUN_TYPE_SCHEDULED,
        state=state,
        conf_json="{}",
    )


class DagServicer(dag_pb2_grpc.DagServiceServicer):
    def __init__(self) -> None:
        self.dags = {"etl": _dag("etl"), "report": _dag("report", paused=True)}
        self.runs = [_run("etl", f"scheduled__2024-01-0{d}", d) for d in (3, 2, 1)]
        self.requests: list[object] = []
        self.log_gate = threading.Event()
        self.unavailable = False

    def _find(self, dag_id, context):
        if self.unavailable:
            context.abort(C.UNAVAILABLE, "no quorum: 1 of 3 nodes reachable")
        if dag_id not in self.dags:
            context.abort(C.NOT_FOUND, f"DAG {dag_id!r} not found")
        return self.dags[dag_id]

    def ListDags(self, request, context):
        self.requests.append(request)
        names = sorted(self.dags)
        start = int(request.page_token or 0)  # one DAG a page: the CLI must follow pages
        token = str(start + 1) if start + 1 < len(names) else ""
        return dag_pb2.ListDagsResponse(
            dags=[self.dags[names[start]]], next_page_token=token, total_size=len(names)
        )

    def GetDag(self, request, context):
        dag = self._find(request.dag_id, context)
        tasks = [
            dag_pb2.TaskDefinition(task_id="extract", kind="bash", command="echo hi", retries=2),
            dag_pb2.TaskDefinition(
                task_id="load", kind="python", trigger_rule="all_success", upstream=["extract"]
            ),
        ]
        return dag_pb2.GetDagResponse(dag=dag, tasks=tasks, freshness=FRESH)

    def PauseDag(self, request, context):
        return self._set_paused(request, context, True)

    def UnpauseDag(self, request, context):
        return self._set_paused(request, context, False)

    def _set_paused(self, request, context, paused):
        self.requests.append(request)
        dag = self._find(request.dag_id, context)
        changed = dag.paused != paused
        dag.paused = paused
        return dag_pb2.PauseDagResponse(dag=dag, changed=changed, freshness=FRESH)

    def TriggerDag(self, request, context):
        self.requests.append(request)
        self._find(request.dag_id, context)
        if request.run_id == "taken":
            context.abort(C.ALREADY_EXISTS, "run 'taken' of DAG 'etl' already exists")
        logical = request.logical_date if request.HasField("logical_date") else ts("2024-02-01")
        run = dag_pb2.DagRun(
            dag_id=request.dag_id,
            run_id=request.run_id or "manual__x",
            logical_date=logical,
            run_type=common_pb2.RUN_TYPE_MANUAL,
            state=common_pb2.RUN_STATE_QUEUED,
            conf_json=request.conf_json or "{}",
        )
        return dag_pb2.TriggerDagResponse(run=run, freshness=FRESH)

    def ListRuns(self, request, context):
        self.requests.append(request)
        runs = [r for r in self.runs if not request.dag_id or r.dag_id == request.dag_id]
        if request.dag_id and request.dag_id not in self.dags:
            context.abort(C.NOT_FOUND, f"DAG {request.dag_id!r} not found")
        start = int(request.page_token or 0)
        end = start + 2  # two a page
        token = str(end) if end < len(runs) else ""
        return dag_pb2.ListRunsResponse(runs=runs[start:end], next_page_token=token)

    def ListTaskInstances(self, request, context):
        self._find(request.dag_id, context)
        if request.run_id != "r1":
            context.abort(
                C.NOT_FOUND, f"run {request.run_id!r} of DAG {request.dag_id!r} not found"
            )
        tis = [
            dag_pb2.TaskInstance(
                key=common_pb2.TaskKey(dag_id="etl", run_id="r1", task_id="extract"),
                state=common_pb2.TASK_STATE_SUCCESS,
                try_number=1,
                max_tries=3,
                worker_id="w1",
                exit_code=0,
                start_date=ts("2024-01-01T00:00:05+00:00"),
            ),
            dag_pb2.TaskInstance(
                key=common_pb2.TaskKey(dag_id="etl", run_id="r1", task_id="load"),
                state=common_pb2.TASK_STATE_UP_FOR_RETRY,
                try_number=1,
                max_tries=2,
            ),
        ]
        return dag_pb2.ListTaskInstancesResponse(
            run=_run("etl", "r1", 1, state=common_pb2.RUN_STATE_RUNNING), task_instances=tis
        )

    def ClearTasks(self, request, context):
        self.requests.append(request)
        self._find(request.dag_id, context)
        ids = list(request.task_ids) or ["extract", "load"]
        if request.include_downstream:
            ids = sorted({*ids, "load"})
        return dag_pb2.ClearTasksResponse(cleared_task_ids=ids)

    def MarkTasks(self, request, context):
        self.requests.append(request)
        self._find(request.dag_id, context)
        return dag_pb2.MarkTasksResponse(marked_task_ids=sorted(request.task_ids))

    def GetTaskLog(self, request, context):
        self.requests.append(request)
        self._find(request.dag_id, context)
        yield common_pb2.LogChunk(seq=1, try_number=1, stream="stdout", text="one\n")
        if request.follow:  # the CLI must have written "one" before this lets go
            self.log_gate.wait(10)
        yield common_pb2.LogChunk(seq=2, try_number=1, stream="stderr", text="two\n")

    def ListImportErrors(self, request, context):
        return dag_pb2.ListImportErrorsResponse(
            import_errors=[
                dag_pb2.DagImportError(
                    fileloc="/dags/broken.py", message="SyntaxError: oops", traceback="..."
                )
            ]
        )


class UserServicer(user_pb2_grpc.UserServiceServicer):
    def __init__(self) -> None:
        self.users = {"root": ("pw-root-123", "admin")}
        self.created: list[user_pb2.CreateUserRequest] = []

    def CreateUser(self, request, context):
        self.created.append(request)
        if request.username in self.users and not request.replace:
            context.abort(C.ALREADY_EXISTS, f"user {request.username!r} already exists")
        self.users[request.username] = (request.password, request.role)
        return user_pb2.User(
            username=request.username, role=request.role, created_at=ts("2024-03-01T10:00:00")
        )

    def ListUsers(self, request, context):
        users = [
            user_pb2.User(username=name, role=role, created_at=ts("2024-03-01T10:00:00"))
            for name, (_, role) in sorted(self.users.items())
        ]
        return user_pb2.ListUsersResponse(users=users)

    def DeleteUser(self, request, context):
        return user_pb2.DeleteUserResponse(
            deleted=self.users.pop(request.username, None) is not None
        )


@dataclass
class FakeCluster:
    address: str
    cluster: ClusterServicer
    dags: DagServicer
    users: UserServicer
    extra: list[str] = field(default_factory=list)

    def argv(self, *words: str, token: str | None = "admin", output: str = "table") -> list[str]:
        argv = [*words, "--server", self.address, "--timeout", "3", "--output", output]
        if token:
            argv += ["--token", TOKENS[token]]
        return argv


@contextmanager
def fake_cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    api = replace(
        default_config(tmp_path).api,
        grpc_bind="127.0.0.1:0",
        admin_tokens=(TOKENS["admin"],),
        operator_tokens=(TOKENS["operator"],),
        viewer_tokens=(TOKENS["viewer"],),
    )
    servicers = ClusterServicer(), DagServicer(), UserServicer()
    server = build_server(api, servicers, max_workers=8)
    server.start()
    try:
        yield FakeCluster(server.address, *servicers)
    finally:
        servicers[1].log_gate.set()
        server.stop(grace=None)


def isolate(monkeypatch, tmp_path: Path) -> None:
    """No server, token or config from the environment of whoever runs the tests."""
    for var in ("RAFTSCHED_SERVER", "RAFTSCHED_TOKEN", "RAFTSCHED_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAFTSCHED_HOME", str(tmp_path / "home"))
