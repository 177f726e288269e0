"""A client session through the faults, and the history check over what it saw (issue #15).

:class:`SessionClient` is one logical client (one ``RaftschedClient``, index tracking on, as
the CLI, the web and the workers use it) that keeps reading through every node in rotation
while the nemesis runs: it lists the DAGs, shows the ones it has seen and lists their runs,
and records every answer (node, ``freshness.applied_index``) and every refusal.
:func:`check_client_sessions` judges that history (verdict 7):

- ``went-back``: an answer older (lower applied index) than one the client saw before;
- ``refused-seen``: NOT_FOUND for a DAG the client has already seen listed, or a listing
  that lost one.

Failed calls (UNAVAILABLE while a node is cut off, deadlines) are allowed: the guarantee is
about the answers a client gets, never that it gets one. Only reads: the session must not
add runs to the workload the other invariants judge.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from scripts.partition.verdict import Verdict

INTERVAL = 0.2  # seconds between two calls of the session
DEADLINE = 3.0  # seconds per call, retries included
ATTEMPT = 1.0  # seconds per attempt: a node cut off costs at most this much


@dataclass(frozen=True, slots=True)
class ClientOp:
    at: datetime
    name: str  # the RPC
    target: str  # the DAG asked about, or "*"
    node: str = ""  # the node that answered ("" when none did)
    index: int = 0  # the answer's freshness.applied_index
    outcome: str = "ok"  # "ok" or the status code's name
    listed: tuple[str, ...] = ()  # ListDags: the DAG ids in the answer


class SessionClient:
    """Reads through ``servers`` in rotation on a thread until :meth:`stop`."""

    def __init__(self, servers: Sequence[str], token: str | None) -> None:
        from raftsched.api.client import RaftschedClient

        self.client = RaftschedClient(
            list(servers), token=token, deadline=DEADLINE, attempt_timeout=ATTEMPT
        )
        self.ops: list[ClientOp] = []
        self._seen: set[str] = set()
        self._turn = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="client-session", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE * 3)
        self.client.close()

    def _loop(self) -> None:
        from raftsched.api.gen import dag_pb2

        while not self._stop.wait(INTERVAL):
            op = self._call("ListDags", "*", dag_pb2.ListDagsRequest(page_size=1000))
            self._seen |= set(op.listed)
            for dag_id in sorted(self._seen)[:2]:
                if self._stop.is_set():
                    return
                self._call("GetDag", dag_id, dag_pb2.GetDagRequest(dag_id=dag_id))
                request = dag_pb2.ListRunsRequest(dag_id=dag_id, page_size=5)
                self._call("ListRuns", dag_id, request)

    def _call(self, name: str, target: str, request: Any) -> ClientOp:
        from raftsched.errors import ApiError, RaftschedError

        self.client._mark_good(self._turn % len(self.client.servers))  # start at the next node
        self._turn += 1
        at = datetime.now(UTC)
        try:
            response = getattr(self.client.dags, name)(request)
        except ApiError as err:
            op = ClientOp(at, name, target, node=err.address, outcome=err.code.name)
        except RaftschedError:  # every node unavailable (NoQuorumError)
            op = ClientOp(at, name, target, outcome="UNAVAILABLE")
        else:
            fresh = response.freshness
            listed = tuple(d.dag_id for d in response.dags) if name == "ListDags" else ()
            op = ClientOp(at, name, target, fresh.node_id, int(fresh.applied_index), "ok", listed)
        self.ops.append(op)
        return op


def check_client_sessions(ops: Iterable[ClientOp], *, require_answers: bool = True) -> Verdict:
    """Verdict 7 over one session's operations, in the order they were made."""
    verdict = Verdict("clients_never_go_back")
    top: ClientOp | None = None
    seen: set[str] = set()
    failed = 0
    for op in ops:
        if op.outcome == "NOT_FOUND" and op.target in seen:
            detail = f"{op.name} {op.target}: NOT_FOUND from {op.node or '?'} after it was listed"
            verdict.add("refused-seen", detail, op=_row(op))
        if op.outcome != "ok":
            failed += op.outcome != "NOT_FOUND"
            continue
        verdict.checked += 1
        lost = seen - set(op.listed) if op.name == "ListDags" else set()
        if lost:
            detail = f"ListDags at {op.node} (index {op.index}) lost {sorted(lost)} seen before"
            verdict.add("refused-seen", detail, op=_row(op))
        seen |= set(op.listed)
        if top is not None and op.index < top.index:
            detail = (
                f"{op.name} {op.target} at {op.node}: index {op.index}, after index"
                f" {top.index} from {top.node}"
            )
            verdict.add("went-back", detail, op=_row(op), before=_row(top))
        if top is None or op.index > top.index:
            top = op
    verdict.notes.append(f"{verdict.checked} answers judged, {failed} calls failed (allowed)")
    if require_answers and not verdict.checked:
        verdict.add("vacuous", "the client session got no answer at all: nothing was checked")
    return verdict


def _row(op: ClientOp) -> dict[str, Any]:
    row = asdict(op)
    row.pop("listed")
    return row
