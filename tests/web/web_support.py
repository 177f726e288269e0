"""Canned servicers for the web tests: a real gRPC server (raftsched.api.server.build_server,
over a loopback socket, with the token interceptor) answering from in-memory data.

``CannedCluster`` holds the data; tests read what the webserver asked for (``calls``) and
change what the cluster says (``leaderless``, ``users``...). ``reset()`` restores it all.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc
from raftsched.web import create_app
from werkzeug.security import check_password_hash, generate_password_hash

from raftsched.api.auth import caller_actor
from raftsched.api.gen import (
    cluster_pb2,
    cluster_pb2_grpc,
    common_pb2,
    dag_pb2,
    dag_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
)
from raftsched.api.server import ApiServer, build_server
from raftsched.config import default_config

if TYPE_CHECKING:
    from flask import Flask
    from flask.testing import FlaskClient

TOKEN = "web-admin-token-for-tests"
PASSWORDS = {"admin": "admin-pass-1", "op": "operator-pass", "viewer": "viewer-pass"}
ROLES = {"admin": "admin", "op": "operator", "viewer": "viewer"}
T0 = datetime(2024, 1, 1, tzinfo=UTC)
BULK = 120  # extra DAGs, for paging


def _ts(value: datetime) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _hash(password: str) -> str:
    # werkzeug's format, as the cluster stores it; a cheap method keeps the tests fast
    return generate_password_hash(password, method="pbkdf2:sha256:1000")


class CannedCluster:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.actors: list[str] = []  # the audit log's actor of each pause/unpause (api/auth.py)
        self.leaderless = False
        self.skipped: dict[str, list[tuple[datetime, datetime, int, str]]] = {}  # by DAG
        self.paused: dict[str, bool] = {"etl_daily": False, "paused_dag": True}
        self.paused.update({f"bulk_{i:03d}": i % 2 == 0 for i in range(BULK)})
        self.users: dict[str, tuple[str, str, datetime]] = {}
        self.verified = 0  # VerifyUser calls: logins check passwords on the webserver
        for name, password in PASSWORDS.items():
            self.users[name] = (ROLES[name], _hash(password), T0)
        self.runs: dict[str, list[dict[str, Any]]] = {
            "etl_daily": [
                {"run_id": f"scheduled__2024-01-0{d}", "day": d, "state": s}
                for d, s in ((1, "success"), (2, "failed"), (3, "running"))
            ],
            "paused_dag": [],
        }
        self.ti_states = {
            "scheduled__2024-01-01": {
                "extract": "success",
                "transform": "success",
                "load": "success",
            },
            "scheduled__2024-01-02": {
                "extract": "success",
                "transform": "failed",
                "load": "upstream_failed",
            },
            "scheduled__2024-01-03": {"extract": "success", "transform": "running", "load": "none"},
        }
        self.logs = [
            ("stdout", "starting transform\n"),
            ("stderr", "warning: slow input\n"),
            ("stdout", "row 1000 of 5000\n"),
        ]

    # -- data as proto ----------------------------------------------------------------------

    def dag_ids(self) -> list[str]:
        return sorted(self.paused)

    def dag(self, dag_id: str, recent: int = 10) -> dag_pb2.Dag:
        etl = dag_id == "etl_daily"
        dag = dag_pb2.Dag(
            dag_id=dag_id,
            fileloc=f"/dags/{dag_id}.py",
            description="Extract, transform, load" if etl else "",
            tags=["etl", "daily"] if etl else [],
            schedule=(
                dag_pb2.Schedule(kind="none", display="None")  # schedule=None: manual only
                if dag_id == "paused_dag"
                else dag_pb2.Schedule(kind="cron", cron="0 0 * * *", display="@daily")
            ),
            timezone="UTC",
            catchup=True,
            max_active_runs=1,
            paused=self.paused[dag_id],
            active=True,
            task_count=3 if etl else 1,
        )
        if not self.paused[dag_id]:
            dag.next_run.logical_date.CopyFrom(_ts(T0 + timedelta(days=4)))
        for first, last, count, reason in self.skipped.get(dag_id, []):
            dag.skipped.append(
                dag_pb2.SkippedSlots(
                    first=_ts(first), last=_ts(last), count=count, reason=reason, decided_at=_ts(T0)
                )
            )
        for run in reversed(self.runs.get(dag_id, [])[-recent:]):
            dag.recent_runs.append(
                dag_pb2.RunSummary(
                    run_id=run["run_id"],
                    state=common_pb2.RunState.Value(f"RUN_STATE_{run['state'].upper()}"),
                    logical_date=_ts(T0 + timedelta(days=run["day"] - 1)),
                    run_type=common_pb2.RUN_TYPE_SCHEDULED,
                )
            )
        return dag

    def tasks(self, dag_id: str) -> list[dag_pb2.TaskDefinition]:
        if dag_id != "etl_daily":
            return [dag_pb2.TaskDefinition(task_id="only", kind="bash", command="true")]
        return [
            dag_pb2.TaskDefinition(task_id="extract", kind="bash", command="echo e"),
            dag_pb2.TaskDefinition(
                task_id="load",
                kind="bash",
                command="echo l",
                upstream=["transform"],
                pool="warehouse",
                pool_slots=2,
            ),
            dag_pb2.TaskDefinition(
                task_id="transform", kind="python", callable_name="t", upstream=["extract"]
            ),
        ]

    def run(self, dag_id: str, run: dict[str, Any]) -> dag_pb2.DagRun:
        return dag_pb2.DagRun(
            dag_id=dag_id,
            run_id=run["run_id"],
            logical_date=_ts(T0 + timedelta(days=run["day"] - 1)),
            run_type=common_pb2.RUN_TYPE_SCHEDULED,
            state=common_pb2.RunState.Value(f"RUN_STATE_{run['state'].upper()}"),
            conf_json=run.get("conf", "{}"),
        )

    def find_run(self, dag_id: str, run_id: str) -> dict[str, Any] | None:
        return next((r for r in self.runs.get(dag_id, []) if r["run_id"] == run_id), None)


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(self, canned: CannedCluster) -> None:
        self.canned = canned

    def ListAuditRecords(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("ListAuditRecords", request))
        record = cluster_pb2.AuditRecord(
            id=7, log_index=42, actor="op via web", action="pause", dag_id="etl_daily"
        )
        record.at.FromDatetime(T0)
        return cluster_pb2.ListAuditRecordsResponse(records=[record])

    def GetStatus(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("GetStatus", request.local_only))
        nodes = []
        for i in range(3):
            role = "FOLLOWER" if i or self.canned.leaderless else "LEADER"
            node = cluster_pb2.NodeStatus(
                node_id=f"127.0.0.1:710{i + 1}",
                address=f"127.0.0.1:710{i + 1}",
                api_address=f"127.0.0.1:730{i + 1}",
                role=cluster_pb2.NodeRole.Value(f"NODE_ROLE_{role}"),
                term=7,
                commit_index=420,
                applied_index=420 - i,
                lag=i,
                outbox_backlog=3,
                has_quorum=not self.canned.leaderless,
                last_leader_contact=_ts(T0 + timedelta(seconds=i)),
            )
            if role == "LEADER":
                node.db_watermark = 4242
                node.db_ok = True
            nodes.append(node)
        if request.local_only:
            nodes = nodes[:1]
        return cluster_pb2.GetStatusResponse(
            nodes=nodes, freshness=common_pb2.Freshness(node_id="127.0.0.1:7101")
        )


class DagServicer(dag_pb2_grpc.DagServiceServicer):
    def __init__(self, canned: CannedCluster) -> None:
        self.canned = canned

    def _known(self, dag_id: str, context: Any) -> None:
        if dag_id not in self.canned.paused:
            context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {dag_id!r} not found")

    def ListDags(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("ListDags", request.search))
        ids = [
            d
            for d in self.canned.dag_ids()
            if request.search.lower() in d.lower()
            and (not request.HasField("paused") or self.canned.paused[d] == request.paused)
        ]
        start = int(request.page_token or 0)
        size = request.page_size or 100
        page = ids[start : start + size]
        token = str(start + size) if start + size < len(ids) else ""
        return dag_pb2.ListDagsResponse(
            dags=[self.canned.dag(d, request.recent_runs or 10) for d in page],
            next_page_token=token,
            total_size=len(ids),
        )

    def GetDag(self, request: Any, context: Any) -> Any:
        self._known(request.dag_id, context)
        return dag_pb2.GetDagResponse(
            dag=self.canned.dag(request.dag_id), tasks=self.canned.tasks(request.dag_id)
        )

    def _set_paused(self, request: Any, context: Any, paused: bool) -> Any:
        self._known(request.dag_id, context)
        self.canned.calls.append(("Pause" if paused else "Unpause", request.dag_id))
        self.canned.actors.append(caller_actor())
        changed = self.canned.paused[request.dag_id] != paused
        self.canned.paused[request.dag_id] = paused
        return dag_pb2.PauseDagResponse(dag=self.canned.dag(request.dag_id), changed=changed)

    def PauseDag(self, request: Any, context: Any) -> Any:
        return self._set_paused(request, context, True)

    def UnpauseDag(self, request: Any, context: Any) -> Any:
        return self._set_paused(request, context, False)

    def TriggerDag(self, request: Any, context: Any) -> Any:
        self._known(request.dag_id, context)
        self.canned.calls.append(("TriggerDag", request))
        conf = json.loads(request.conf_json or "{}")
        if not isinstance(conf, dict):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "conf_json: expected a JSON object")
        run_id = request.run_id or f"manual__{len(self.canned.calls)}"
        if self.canned.find_run(request.dag_id, run_id):
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"run {run_id!r} already exists")
        run = {"run_id": run_id, "day": 9, "state": "queued", "conf": request.conf_json}
        self.canned.runs[request.dag_id].append(run)
        return dag_pb2.TriggerDagResponse(run=self.canned.run(request.dag_id, run))

    def ListRuns(self, request: Any, context: Any) -> Any:
        dags = [request.dag_id] if request.dag_id else sorted(self.canned.runs)
        runs = [self.canned.run(d, r) for d in dags for r in reversed(self.canned.runs.get(d, []))]
        if request.states:
            runs = [r for r in runs if r.state in request.states]
        return dag_pb2.ListRunsResponse(runs=runs[: request.page_size or 100])

    def ListTaskInstances(self, request: Any, context: Any) -> Any:
        run = self.canned.find_run(request.dag_id, request.run_id)
        if run is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"run {request.run_id!r} not found")
        states = self.canned.ti_states.get(run["run_id"], {"extract": "queued"})
        tis = []
        for task_id, state in sorted(states.items()):
            ti = dag_pb2.TaskInstance(
                key=common_pb2.TaskKey(
                    dag_id=request.dag_id, run_id=run["run_id"], task_id=task_id
                ),
                state=common_pb2.TaskState.Value(f"TASK_STATE_{state.upper()}"),
                try_number=0 if state == "none" else 1,
                max_tries=2,
                worker_id="worker-1" if state != "none" else "",
            )
            if state == "failed":
                ti.exit_code = 2
                ti.message = "exit code 2"
            tis.append(ti)
        return dag_pb2.ListTaskInstancesResponse(
            run=self.canned.run(request.dag_id, run), task_instances=tis
        )

    def ClearTasks(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("ClearTasks", request))
        ids = list(request.task_ids) or ["extract", "load", "transform"]
        return dag_pb2.ClearTasksResponse(cleared_task_ids=sorted(ids))

    def MarkTasks(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("MarkTasks", request))
        return dag_pb2.MarkTasksResponse(marked_task_ids=sorted(request.task_ids))

    def GetTaskLog(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("GetTaskLog", request))
        for seq, (stream, text) in enumerate(self.canned.logs, start=1):
            if seq > request.after_seq:
                yield common_pb2.LogChunk(seq=seq, try_number=1, stream=stream, text=text)

    def ListImportErrors(self, request: Any, context: Any) -> Any:
        return dag_pb2.ListImportErrorsResponse(
            import_errors=[
                dag_pb2.DagImportError(
                    fileloc="/dags/broken.py",
                    message="SyntaxError: invalid syntax (broken.py, line 3)",
                    traceback='Traceback (most recent call last):\n  File "/dags/broken.py"',
                )
            ]
        )


class UserServicer(user_pb2_grpc.UserServiceServicer):
    def __init__(self, canned: CannedCluster) -> None:
        self.canned = canned

    def _user(self, name: str) -> user_pb2.User:
        role, _, created = self.canned.users[name]
        return user_pb2.User(username=name, role=role, created_at=_ts(created))

    def VerifyUser(self, request: Any, context: Any) -> Any:
        self.canned.verified += 1
        found = self.canned.users.get(request.username)
        if found and check_password_hash(found[1], request.password):
            return user_pb2.VerifyUserResponse(ok=True, role=found[0])
        return user_pb2.VerifyUserResponse(ok=False)

    def GetPasswordHash(self, request: Any, context: Any) -> Any:
        found = self.canned.users.get(request.username)
        if found is None:
            return user_pb2.GetPasswordHashResponse(found=False)
        return user_pb2.GetPasswordHashResponse(found=True, password_hash=found[1], role=found[0])

    def ListUsers(self, request: Any, context: Any) -> Any:
        return user_pb2.ListUsersResponse(users=[self._user(n) for n in sorted(self.canned.users)])

    def CreateUser(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("CreateUser", request.username))
        if request.username in self.canned.users and not request.replace:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"user {request.username!r} exists")
        self.canned.users[request.username] = (request.role, _hash(request.password), T0)
        return self._user(request.username)

    def DeleteUser(self, request: Any, context: Any) -> Any:
        self.canned.calls.append(("DeleteUser", request.username))
        return user_pb2.DeleteUserResponse(
            deleted=self.canned.users.pop(request.username, None) is not None
        )


def start_server(canned: CannedCluster) -> ApiServer:
    api = dataclasses.replace(default_config().api, admin_tokens=(TOKEN,))
    servicers = [ClusterServicer(canned), DagServicer(canned), UserServicer(canned)]
    server = build_server(api, servicers, bind="127.0.0.1:0", max_workers=16)
    server.start()
    return server


CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')


def csrf_token(client: FlaskClient, path: str = "/login") -> str:
    found = CSRF_META.search(client.get(path).get_data(as_text=True))
    assert found, f"no csrf meta tag on {path}"
    return found.group(1)


def login(client: FlaskClient, username: str, password: str | None = None) -> Any:
    token = csrf_token(client)
    return client.post(
        "/login",
        data={
            "username": username,
            "password": PASSWORDS[username] if password is None else password,
            "csrf_token": token,
        },
    )


def logged_in_session(client: FlaskClient, username: str, role: str) -> None:
    """Put a user in the session without the cluster (for tests where it is down)."""
    with client.session_transaction() as session:
        session["user"], session["role"] = username, role


def make_app(servers: list[str], **extra: Any) -> Flask:
    config = {
        "TESTING": True,
        "SECRET_KEY": "a-test-secret",
        "RAFTSCHED_SERVERS": servers,
        "RAFTSCHED_TOKEN": TOKEN,
        "RAFTSCHED_DEADLINE": 3.0,
        "RAFTSCHED_USER_RECHECK_SECONDS": 0.0,
        "DAGS_PAGE_SIZE": 50,
        **extra,
    }
    return create_app(config)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
