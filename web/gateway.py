"""The webserver's one door to the cluster: a :class:`Gateway` around ``RaftschedClient``.

Blueprints call ``gateway()`` methods and get plain dicts, lists and datetimes back, never
proto messages, so templates and JSON endpoints stay simple. Failures arrive as three
exceptions (mapped to pages in ``handlers.py``):

- :class:`Unavailable`: no node could answer (no quorum, every node down, deadline passed):
  the "cluster is unreachable" banner, status 503;
- :class:`NotFound`: the DAG, run or task does not exist: the 404 page;
- :class:`Refused`: any other refusal (bad argument, already exists, paused...), whose
  message is meant for the person who asked: shown in the form or as a flash message.

Every upstream failure is counted in ``raftsched_web_upstream_errors_total{method,code}``.
The client is created lazily, once per process (gunicorn forks workers; gRPC channels must be
made after the fork), and shared by every thread: it is thread-safe.

Consistency: each user's session (the signed cookie, shared by every webserver) holds the
highest applied index the user has seen or caused (:data:`SESSION_KEY`); every call sends it
and raises it (``RaftschedClient(seen=...)``), so one user's pages never go back in time,
whichever webserver and node answer: a run triggered through one webserver is on the run
page served by another. See README "Consistency".
Errors: ``gateway_errors.py``; proto -> dict view models: ``view_models.py`` (re-exported).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from datetime import UTC
from typing import Any

from flask import Flask, current_app, has_request_context, session
from google.protobuf.message import Message
from raftsched.web import acting_user, metrics
from raftsched.web.gateway_errors import GatewayError, NotFound, Refused, Unavailable, _translate
from raftsched.web.gateway_schedule import DagSchedule
from raftsched.web.read_cache import DEFAULT_TTL, ReadCache
from raftsched.web.view_models import dag_dict, node_dict, run_dict, task_dict, ti_dict, ts

from raftsched.api.client import RaftschedClient, SeenIndex
from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2, user_pb2
from raftsched.errors import ApiError, NoQuorumError

__all__ = [
    "EXTENSION",
    "FINISHED_TASK_STATES",
    "SESSION_KEY",
    "Gateway",
    "GatewayError",
    "NotFound",
    "Refused",
    "Unavailable",
    "_translate",
    "dag_dict",
    "gateway",
    "init_app",
    "read_cache_seconds",
    "remember_seen",
    "session_seen",
]

EXTENSION = "raftsched_gateway"
SESSION_KEY = "seen_index"  # the user's highest applied index seen, in the session cookie
FINISHED_TASK_STATES = frozenset({"success", "failed", "upstream_failed", "skipped"})


class Gateway(DagSchedule):
    """Typed, dict-returning calls to the cluster. Thread-safe."""

    def __init__(
        self,
        servers: Iterable[str],
        *,
        token: str | None = None,
        tls_ca: str | None = None,
        deadline: float = 5.0,
        cache_ttl: float = DEFAULT_TTL,
    ) -> None:
        self.servers = tuple(servers)
        self.token = token or None
        self.tls_ca = tls_ca or None
        self.deadline = deadline
        # Read answers reused for a moment, under the caller's consistency (read_cache.py).
        self.cache = ReadCache(cache_ttl)
        self._lock = threading.Lock()
        self._client: RaftschedClient | None = None
        self._probes: dict[str, RaftschedClient] = {}

    def __repr__(self) -> str:
        return f"Gateway({list(self.servers)!r})"  # never the token

    def _new_client(
        self, servers: Iterable[str], deadline: float, *, track_index: bool = True
    ) -> RaftschedClient:
        return RaftschedClient(
            list(servers),
            token=self.token,
            tls_ca=self.tls_ca,
            deadline=deadline,
            track_index=track_index,
        )

    @property
    def client(self) -> RaftschedClient:
        with self._lock:
            if self._client is None:
                self._client = self._new_client(self.servers, self.deadline)
            return self._client

    def close(self) -> None:
        with self._lock:
            clients = [c for c in (self._client, *self._probes.values()) if c is not None]
            self._client, self._probes = None, {}
        for client in clients:
            client.close()

    def _call(self, service: str, method: str, request: Message, **kwargs: Any) -> Any:
        seen = session_seen()
        kwargs = acting_user.with_user(method, kwargs)  # the audit log names the person
        # The pages all call as this webserver (its token): one identity for the cache.
        key = None if kwargs else self.cache.key(method, request, "")
        hit = self.cache.get(key, seen.value if seen is not None else 0)
        if hit is not None:
            if seen is not None:
                seen.observe(hit[0])
                remember_seen(seen)
            return hit[1]
        try:
            response = getattr(getattr(self.client, service), method)(request, seen=seen, **kwargs)
            remember_seen(seen)
            self.cache.put(key, response)
            return response
        except NoQuorumError as err:
            metrics.upstream_error(method, "UNAVAILABLE")
            raise Unavailable(str(err), "UNAVAILABLE") from None
        except ApiError as err:
            raise _translate(err, method) from None
        finally:
            self.cache.after_call(method)  # a write (even a failed one) empties the cache

    # -- DAGs --------------------------------------------------------------------------------

    def list_dags(
        self,
        *,
        search: str = "",
        paused: bool | None = None,
        page_size: int = 50,
        page_token: str = "",
        recent_runs: int = 10,
        with_answer: bool = False,
    ) -> dict[str, Any]:
        """The page as dicts; ``with_answer``: the cluster's answer itself instead ("answer":
        the same object while the read cache keeps it, so the list page can reuse its rows;
        "dags" is then None: convert with ``dag_dict`` if needed)."""
        request = dag_pb2.ListDagsRequest(
            search=search, page_size=page_size, page_token=page_token, recent_runs=recent_runs
        )
        if paused is not None:
            request.paused = paused
        response = self._call("dags", "ListDags", request)
        out = {
            "dags": None if with_answer else [dag_dict(d) for d in response.dags],
            "next_page_token": response.next_page_token,
            "total_size": response.total_size,
        }
        if with_answer:
            out["answer"] = response
        return out

    def get_dag(self, dag_id: str) -> dict[str, Any]:
        response = self._call("dags", "GetDag", dag_pb2.GetDagRequest(dag_id=dag_id))
        dag = dag_dict(response.dag)
        dag["tasks"] = [task_dict(t) for t in response.tasks]
        return dag

    def trigger(
        self, dag_id: str, conf: dict[str, Any], *, run_id: str = "", logical_date: Any = None
    ) -> dict[str, Any]:
        request = dag_pb2.TriggerDagRequest(
            dag_id=dag_id, conf_json=json.dumps(conf), run_id=run_id
        )
        if logical_date is not None:
            request.logical_date.FromDatetime(logical_date.astimezone(UTC))
        return run_dict(self._call("dags", "TriggerDag", request).run)

    def list_runs(
        self, dag_id: str = "", *, states: Iterable[str] = (), page_size: int = 25, page_token=""
    ) -> dict[str, Any]:
        request = dag_pb2.ListRunsRequest(
            dag_id=dag_id,
            states=[common_pb2.RunState.Value(f"RUN_STATE_{s.upper()}") for s in states],
            page_size=page_size,
            page_token=page_token,
        )
        response = self._call("dags", "ListRuns", request)
        return {
            "runs": [run_dict(r) for r in response.runs],
            "next_page_token": response.next_page_token,
        }

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, Any]:
        request = dag_pb2.ListTaskInstancesRequest(dag_id=dag_id, run_id=run_id)
        response = self._call("dags", "ListTaskInstances", request)
        return {
            "run": run_dict(response.run),
            "task_instances": [ti_dict(t) for t in response.task_instances],
        }

    def clear(
        self, dag_id: str, run_id: str, task_ids: list[str], *, downstream: bool = False
    ) -> list[str]:
        request = dag_pb2.ClearTasksRequest(
            dag_id=dag_id, run_id=run_id, task_ids=task_ids, include_downstream=downstream
        )
        return list(self._call("dags", "ClearTasks", request).cleared_task_ids)

    def mark(self, dag_id: str, run_id: str, task_ids: list[str], state: str) -> list[str]:
        request = dag_pb2.MarkTasksRequest(
            dag_id=dag_id,
            run_id=run_id,
            task_ids=task_ids,
            state=common_pb2.TaskState.Value(f"TASK_STATE_{state.upper()}"),
        )
        return list(self._call("dags", "MarkTasks", request).marked_task_ids)

    def task_log(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        *,
        try_number: int = 0,
        after_seq: int = 0,
        limit: int = 500,
    ) -> list[dict[str, Any]]:
        """Stored chunks after ``after_seq`` (at most ``limit``); never waits for new ones."""
        request = dag_pb2.GetTaskLogRequest(
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            try_number=try_number,
            after_seq=after_seq,
            follow=False,
        )
        chunks: list[dict[str, Any]] = []
        stream = self._call("dags", "GetTaskLog", request)
        try:
            for chunk in stream:
                chunks.append(
                    {
                        "seq": chunk.seq,
                        "try_number": chunk.try_number,
                        "stream": chunk.stream,
                        "text": chunk.text,
                        "created_at": ts(chunk, "created_at"),
                    }
                )
                if len(chunks) >= limit:
                    break
        except NoQuorumError as err:
            metrics.upstream_error("GetTaskLog", "UNAVAILABLE")
            raise Unavailable(str(err), "UNAVAILABLE") from None
        except ApiError as err:
            raise _translate(err, "GetTaskLog") from None
        finally:
            stream.close()
        return chunks

    def import_errors(self) -> list[dict[str, str]]:
        response = self._call("dags", "ListImportErrors", dag_pb2.ListImportErrorsRequest())
        return [
            {"fileloc": e.fileloc, "message": e.message, "traceback": e.traceback}
            for e in response.import_errors
        ]

    # -- cluster -----------------------------------------------------------------------------

    def cluster_status(self, *, timeout: float | None = None) -> dict[str, Any]:
        request = cluster_pb2.GetStatusRequest(local_only=False)
        response = self._call("cluster", "GetStatus", request, timeout=timeout)
        nodes = [node_dict(n) for n in response.nodes]
        leaders = [n for n in nodes if n["role"] == "leader" and n["has_quorum"]]
        contacts = [n["last_leader_contact"] for n in nodes if n["last_leader_contact"]]
        # The DB watermark is only known by the leader (its materializer reads it): one
        # cluster-wide figure, from the leader, or from whichever node reports one.
        reporting = leaders + [n for n in nodes if n["db_watermark"] is not None]
        source = reporting[0] if reporting else None
        return {
            "nodes": nodes,
            "leader": leaders[0]["node_id"] if leaders else None,
            "db_watermark": source["db_watermark"] if source else None,
            "db_ok": source["db_ok"] if source else None,
            "outbox_backlog": (
                source["outbox_backlog"]
                if source
                else max((n["outbox_backlog"] for n in nodes), default=None)
            ),
            "backpressure": source["backpressure"] if source else False,
            "watermark_per_node": any(n["db_watermark"] is not None for n in nodes),
            "newest_heartbeat": max(contacts) if contacts else None,
            "answered_by": response.freshness.node_id,
            "applied_index": response.freshness.applied_index,
        }

    def probe(self, address: str, *, timeout: float = 1.0) -> dict[str, Any]:
        """This webserver's own view of one configured server: its local status, or why not."""
        with self._lock:
            client = self._probes.get(address)
            if client is None:
                # A probe shows the node's own view, however far behind: no index tracking.
                client = self._new_client([address], timeout, track_index=False)
                self._probes[address] = client
        request = cluster_pb2.GetStatusRequest(local_only=True)
        try:
            response = client.cluster.GetStatus(request, timeout=timeout)
        except (NoQuorumError, ApiError) as err:
            code = err.code.name if isinstance(err, ApiError) else "UNAVAILABLE"
            metrics.upstream_error("GetStatus", code)
            return {"address": address, "reachable": False, "error": str(err)[:300]}
        node = node_dict(response.nodes[0]) if response.nodes else {}
        return {"address": address, "reachable": True, "error": "", **node}

    # -- users -------------------------------------------------------------------------------

    def password_hash(self, username: str) -> tuple[str, str] | None:
        """(stored hash, role) of a user, None if none: auth.py checks logins, not a node."""
        request = user_pb2.GetPasswordHashRequest(username=username)
        response = self._call("users", "GetPasswordHash", request)
        return (response.password_hash, response.role) if response.found else None

    def list_users(self) -> list[dict[str, Any]]:
        response = self._call("users", "ListUsers", user_pb2.ListUsersRequest())
        return [
            {"username": u.username, "role": u.role, "created_at": ts(u, "created_at")}
            for u in response.users
        ]

    def create_user(self, username: str, password: str, role: str, *, replace: bool) -> None:
        request = user_pb2.CreateUserRequest(
            username=username, password=password, role=role, replace=replace
        )
        self._call("users", "CreateUser", request)

    def delete_user(self, username: str) -> bool:
        request = user_pb2.DeleteUserRequest(username=username)
        return self._call("users", "DeleteUser", request).deleted


def session_seen() -> SeenIndex | None:
    """The index this user has seen, from the session; None outside a request."""
    if not has_request_context():
        return None
    value = session.get(SESSION_KEY, 0)
    return SeenIndex(value if isinstance(value, int) else 0)


def remember_seen(seen: SeenIndex | None) -> None:
    """Put what the user has now seen into the session (a new cookie only when it moved)."""
    if seen is not None and has_request_context() and session.get(SESSION_KEY) != seen.value:
        session[SESSION_KEY] = seen.value


# -- the app's gateway ----------------------------------------------------------------------


def init_app(app: Flask) -> None:
    """Attach a Gateway built from the app's config (RAFTSCHED_SERVERS, RAFTSCHED_TOKEN, ...)."""
    if EXTENSION in app.extensions:
        return
    app.extensions[EXTENSION] = Gateway(
        app.config["RAFTSCHED_SERVERS"],
        token=app.config.get("RAFTSCHED_TOKEN"),
        tls_ca=app.config.get("RAFTSCHED_TLS_CA"),
        deadline=float(app.config.get("RAFTSCHED_DEADLINE", 5.0)),
        cache_ttl=read_cache_seconds(app),
    )


def read_cache_seconds(app: Flask) -> float:
    """``RAFTSCHED_WEB_READ_CACHE_SECONDS`` (read_cache.py): how long a read answer is reused."""
    value = app.config.get("READ_CACHE_SECONDS", DEFAULT_TTL)
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        raise ValueError(
            f"RAFTSCHED_WEB_READ_CACHE_SECONDS = {value!r}: expected seconds, e.g. 0.2 (0: off)"
        ) from None


def gateway() -> Gateway:
    return current_app.extensions[EXTENSION]
