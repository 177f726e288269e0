"""A client's history against a real cluster, and every consistency anomaly in it.

``Workload(cluster, client).run(seconds, max_rounds)`` deploys DAG files one after another
and, from ONE logical client (one ``RaftschedClient``, sequential calls), lists DAGs,
triggers the newest DAG it has seen, and reads back its own runs, starting each call at the
next node in rotation (as CLI invocations that each start at some node, or a load balancer,
would). :class:`History` records every operation and flags each anomaly:

- ``refused-seen``: NOT_FOUND for a DAG (trigger, show) or run the client has already seen;
- ``missing-own-write``: a read without a run this client created (trigger answered OK);
- ``went-back``: an answer whose ``freshness.applied_index`` is below one seen earlier.

With the client's index tracking on (the default) a correct cluster gives none, however far
one replica lags; with ``RaftschedClient(track_index=False)`` a lagging replica shows them.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import dag_pb2
from raftsched.errors import ApiError

DAG_SOURCE = """\
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("{dag_id}", schedule=None, start_date=datetime(2024, 1, 1), max_active_runs=1000):
    BashTask("only", command="true")
"""


@dataclass
class Op:
    name: str
    target: str  # the DAG or run asked about
    node: str = ""  # which node answered
    index: int = 0  # freshness.applied_index of the answer
    outcome: str = "ok"  # "ok" or the status code's name
    anomaly: str = ""


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    seen_dags: set[str] = field(default_factory=set)
    own_runs: dict[str, set[str]] = field(default_factory=dict)  # dag_id -> run ids
    top_index: int = 0

    @property
    def anomalies(self) -> list[Op]:
        return [op for op in self.ops if op.anomaly]

    def counts(self) -> dict[str, int]:
        return dict(Counter(op.anomaly for op in self.anomalies))

    def record(self, op: Op) -> Op:
        if op.index and op.index < self.top_index and not op.anomaly:
            op.anomaly = "went-back"
        self.top_index = max(self.top_index, op.index)
        self.ops.append(op)
        return op

    def summary(self) -> str:
        flagged = [at for at, op in enumerate(self.ops) if op.anomaly][:8]
        shown = "; ".join(
            " <- ".join(_brief(op) for op in reversed(self.ops[max(0, at - 3) : at + 1]))
            for at in flagged
        )
        return f"{len(self.ops)} operations, {len(self.anomalies)} anomalies {self.counts()}" + (
            f": {shown}" if shown else ""
        )


def _brief(op: Op) -> str:
    flag = f": {op.anomaly}" if op.anomaly else ""
    return f"{op.name} {op.target} at {op.node} (index {op.index}, {op.outcome}){flag}"


class Workload:
    def __init__(
        self, dags_folder: Path, client: RaftschedClient, *, prefix: str, deploy_every: int = 3
    ) -> None:
        self.dags_folder = dags_folder
        self.client = client
        self.prefix = prefix
        self.deploy_every = deploy_every
        self.history = History()
        self._deployed = 0
        self._turn = 0

    # -- the loop ---------------------------------------------------------------------------

    def run(self, seconds: float, max_rounds: int) -> History:
        end = time.monotonic() + seconds
        for round_no in range(max_rounds):
            if time.monotonic() >= end:
                break
            if round_no % self.deploy_every == 0:
                self.deploy()
            self.list_dags()
            newest = self.newest_seen()
            if newest is None:
                time.sleep(0.2)
                continue
            run_id = self.trigger(newest)
            self.show_dag(newest)
            if run_id:
                self.task_instances(newest, run_id)
            self.list_runs(newest)
        return self.history

    def deploy(self) -> None:
        dag_id = f"{self.prefix}_{self._deployed}"
        self._deployed += 1
        tmp = self.dags_folder / f".{dag_id}.tmp"
        tmp.write_text(DAG_SOURCE.format(dag_id=dag_id))
        tmp.replace(self.dags_folder / f"{dag_id}.py")

    def newest_seen(self) -> str | None:
        mine = [d for d in self.history.seen_dags if d.startswith(self.prefix + "_")]
        return max(mine, key=lambda d: int(d.rsplit("_", 1)[1]), default=None)

    # -- operations ---------------------------------------------------------------------------

    def _call(self, method: str, request: Any) -> tuple[Any, ApiError | None]:
        self.client._mark_good(self._turn % len(self.client.servers))  # rotate the first node
        self._turn += 1
        try:
            return getattr(self.client.dags, method)(request), None
        except ApiError as err:
            return None, err

    def _op(self, name: str, target: str, response: Any, err: ApiError | None) -> Op:
        if err is not None:
            return Op(name, target, node=err.address, outcome=err.code.name)
        fresh = response.freshness
        return Op(name, target, node=fresh.node_id, index=int(fresh.applied_index))

    def list_dags(self) -> None:
        response, err = self._call("ListDags", dag_pb2.ListDagsRequest(page_size=1000))
        op = self._op("ListDags", "*", response, err)
        if response is not None:
            listed = {d.dag_id for d in response.dags}
            gone = {d for d in self.history.seen_dags if d.startswith(self.prefix)} - listed
            if gone:
                op.anomaly = "refused-seen"
                op.target = ",".join(sorted(gone))
            self.history.seen_dags |= listed
        self.history.record(op)

    def trigger(self, dag_id: str) -> str:
        response, err = self._call("TriggerDag", dag_pb2.TriggerDagRequest(dag_id=dag_id))
        op = self._op("TriggerDag", dag_id, response, err)
        run_id = ""
        if response is not None:
            run_id = response.run.run_id
            self.history.own_runs.setdefault(dag_id, set()).add(run_id)
        elif err is not None and err.code is grpc.StatusCode.NOT_FOUND:
            op.anomaly = "refused-seen"
        self.history.record(op)
        return run_id

    def show_dag(self, dag_id: str) -> None:
        response, err = self._call("GetDag", dag_pb2.GetDagRequest(dag_id=dag_id))
        op = self._op("GetDag", dag_id, response, err)
        if err is not None and err.code is grpc.StatusCode.NOT_FOUND:
            op.anomaly = "refused-seen"
        self.history.record(op)

    def task_instances(self, dag_id: str, run_id: str) -> None:
        request = dag_pb2.ListTaskInstancesRequest(dag_id=dag_id, run_id=run_id)
        response, err = self._call("ListTaskInstances", request)
        op = self._op("ListTaskInstances", f"{dag_id}/{run_id}", response, err)
        if err is not None and err.code is grpc.StatusCode.NOT_FOUND:
            op.anomaly = "missing-own-write"
        self.history.record(op)

    def list_runs(self, dag_id: str) -> None:
        request = dag_pb2.ListRunsRequest(dag_id=dag_id, page_size=1000)
        response, err = self._call("ListRuns", request)
        op = self._op("ListRuns", dag_id, response, err)
        if response is not None:
            listed = {run.run_id for run in response.runs}
            if self.history.own_runs.get(dag_id, set()) - listed:
                op.anomaly = "missing-own-write"
        elif err is not None and err.code is grpc.StatusCode.NOT_FOUND:
            op.anomaly = "refused-seen"
        self.history.record(op)
