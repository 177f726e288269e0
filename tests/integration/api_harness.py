"""ApiCluster: ClusterHarness with the gRPC API in view: tokens, API addresses, clients, and
real `raftsched worker` processes.

    with ApiCluster(tmp_path, db_url, dags={...}, lease_ttl=3) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()                      # admin token, every node
        worker = cluster.start_worker("w1")            # a Node-like process, killable
        cluster.wait_task(client, "dag", run_id, "t", lambda ti: ti.state == SUCCESS)

Each node serves gRPC on its Raft port + 200 ([api] grpc_bind empty). Tokens: ADMIN, OPERATOR,
VIEWER and WORKER below. Workers log to ``<workdir>/logs/worker-<name>.log`` and are stopped
with the nodes when the harness closes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import ClusterHarness, Node, child_env, free_ports, wait_for

from raftsched.addresses import ADMIN_PORT_OFFSET, API_PORT_OFFSET, api_address_for
from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, dag_pb2

ADMIN = "admin-token-0123456789"
OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-0123456789"
WORKER = "worker-token-0123456789"
OFFSETS = (0, ADMIN_PORT_OFFSET, API_PORT_OFFSET)
api_address = api_address_for


@dataclass
class WorkerProc(Node):
    """A `raftsched worker` process, handled like a node (kill -9, stop, logs)."""

    args: list[str] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)  # a command it runs under (setpriv...)
    python: str = sys.executable

    def argv(self) -> list[str]:
        config = str(self.config_path)
        return [*self.wrapper, self.python, "-m", "raftsched", "--config", config, *self.args]

    def status(self, timeout: float = 1.0) -> dict[str, Any] | None:
        return None


class ApiCluster(ClusterHarness):
    def __init__(
        self,
        workdir: Path,
        db_url: str,
        *,
        nodes: int = 3,
        spare: int = 0,
        lease_ttl: float = 3.0,
        heartbeat_interval: float = 0.5,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        ports = free_ports(nodes + spare, offsets=OFFSETS)
        self.spare_addresses = [f"127.0.0.1:{p}" for p in ports[nodes:]]
        overrides: dict[str, dict[str, Any]] = {
            "api": {
                "admin_tokens": ADMIN,
                "operator_tokens": OPERATOR,
                "viewer_tokens": VIEWER,
                "worker_tokens": WORKER,
            },
            "worker": {
                "lease_ttl": lease_ttl,
                "heartbeat_interval": heartbeat_interval,
                "grace_period": 2,
            },
        }
        for section, values in (config or {}).items():
            overrides.setdefault(section, {}).update(values)
        super().__init__(
            workdir, db_url, nodes=nodes, config=overrides, ports=ports[:nodes], **kwargs
        )
        self.workers: dict[str, WorkerProc] = {}
        self._clients: list[RaftschedClient] = []

    @property
    def api_addresses(self) -> list[str]:
        return [api_address(a) for a in self.addresses]

    def client(
        self, token: str | None = ADMIN, *, nodes: list[int] | None = None, **kwargs: Any
    ) -> RaftschedClient:
        servers = [self.api_addresses[i] for i in (nodes or range(len(self.addresses)))]
        kwargs.setdefault("deadline", 15.0)
        client = RaftschedClient(servers, token=token, **kwargs)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            client.close()
        super().close()

    # -- workers ------------------------------------------------------------------------

    def start_worker(
        self,
        name: str,
        *,
        concurrency: int = 2,
        noop: bool = False,
        record: Path | None = None,
        nodes: list[int] | None = None,
        queues: str | None = None,
        token_in_env: bool = False,
        token: str = WORKER,
        wrapper: list[str] | None = None,
        python: str = sys.executable,
        extra_env: Mapping[str, str] | None = None,
    ) -> WorkerProc:
        """``token_in_env``: the token goes in RAFTSCHED_TOKEN, not on the command line
        (which every process on the host reads). ``wrapper``: a command the worker runs under
        (``setpriv ... --``), with ``python`` and ``extra_env``."""
        servers = ",".join(self.api_addresses[i] for i in (nodes or range(len(self.addresses))))
        args = ["worker", "--server", servers, "--worker-id", name]
        # many workers on one host: the default metrics port is off unless a test sets one (in
        # the environment, not the shared config file, which a previous release must also read)
        env = {**child_env(), "RAFTSCHED__WORKER__METRICS_PORT": "0", **(extra_env or {})}
        if token_in_env:
            env["RAFTSCHED_TOKEN"] = token
        else:
            args += ["--token", token]
        args += ["--concurrency", str(concurrency)]
        if noop:
            args.append("--noop")
        if record is not None:
            args += ["--record", str(record)]
        if queues is not None:
            args += ["--queues", queues]
        proc = WorkerProc(
            index=100 + len(self.workers),
            address=f"worker {name}",
            config_path=self.config_path,
            log_path=self.log_dir / f"worker-{name}.log",
            env=env,
            args=args,
            wrapper=list(wrapper or ()),
            python=python,
        )
        proc.start()
        self.workers[name] = proc
        self.extra.append(proc)
        return proc

    # -- waits through the API ----------------------------------------------------------

    def task_instances(self, client: RaftschedClient, dag_id: str, run_id: str) -> list[Any]:
        request = dag_pb2.ListTaskInstancesRequest(dag_id=dag_id, run_id=run_id)
        return list(client.dags.ListTaskInstances(request).task_instances)

    def current(self, client: RaftschedClient, dag_id: str, run_id: str) -> dict[str, Any]:
        """task_id -> its current (last) attempt."""
        out: dict[str, Any] = {}
        for ti in self.task_instances(client, dag_id, run_id):
            out[ti.key.task_id] = ti
        return out

    def wait_task(
        self,
        client: RaftschedClient,
        dag_id: str,
        run_id: str,
        task_id: str,
        check: Callable[[Any], bool],
        *,
        timeout: float = 60.0,
        what: str = "",
    ) -> Any:
        def probe() -> Any:
            ti = self.current(client, dag_id, run_id).get(task_id)
            return ti if ti is not None and check(ti) else None

        return wait_for(
            probe,
            timeout=timeout,
            what=what or f"{dag_id}/{run_id}/{task_id}",
            interval=0.2,
            describe=lambda: {
                k: (v.state, v.try_number, v.worker_id)
                for k, v in self.current(client, dag_id, run_id).items()
            },
        )

    def wait_run(
        self, client: RaftschedClient, dag_id: str, run_id: str, *, timeout: float = 90.0
    ) -> Any:
        """Wait until the run finished (SUCCESS or FAILED) as the API reports it."""
        done = {common_pb2.RUN_STATE_SUCCESS, common_pb2.RUN_STATE_FAILED}

        def probe() -> Any:
            request = dag_pb2.ListTaskInstancesRequest(dag_id=dag_id, run_id=run_id)
            run = client.dags.ListTaskInstances(request).run
            return run if run.state in done else None

        return wait_for(
            probe,
            timeout=timeout,
            what=f"run {dag_id}/{run_id} to finish",
            interval=0.3,
            describe=lambda: {
                k: (v.state, v.try_number, v.worker_id)
                for k, v in self.current(client, dag_id, run_id).items()
            },
        )

    def wait_dags(self, client: RaftschedClient, dag_ids: set[str], timeout: float = 60.0) -> None:
        def probe() -> bool:
            got = {d.dag_id for d in client.dags.ListDags(dag_pb2.ListDagsRequest()).dags}
            return dag_ids <= got

        wait_for(probe, timeout=timeout, what=f"DAGs {sorted(dag_ids)} registered")
