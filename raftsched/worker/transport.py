"""What the worker needs from the cluster, as one small interface, and what a lease carries.

The worker reaches the cluster only through :class:`WorkerTransport`. The real one is
:class:`raftsched.worker.grpc_transport.GrpcWorkerTransport` (WorkerService over
``api.client``); tests use an in-memory fake implementing the same Protocol.

Contract, for every method:

- Thread-safe: the lease loop, the heartbeat thread, the log shippers and the attempt threads
  call it concurrently.
- A call the cluster could not answer (no quorum, every node unreachable, deadline exceeded)
  raises :class:`raftsched.errors.RaftschedError` (typically ``NoQuorumError``); the worker
  logs it at info and tries again later. Any other exception is a bug and is logged with its
  traceback.
- A stale fencing token is not an error: ``heartbeat`` maps that lease to False,
  ``complete`` and ``append_logs`` return False. The worker then kills the attempt (if it
  still runs) and reports nothing more for it.
- :class:`WorkerRejected` (bad token, wrong role) is not retried: the worker stops.
- After :meth:`~WorkerTransport.interrupt` (the worker is stopping) no call outlasts the
  shutdown: an outstanding ``lease`` returns [] at once, and every call made from then on gives
  up after ``call_timeout`` seconds at most.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftsched.core import mapping
from raftsched.core.model import TaskKey
from raftsched.dags.assets import ASSET_EVENTS_ENV

STDOUT = "stdout"
STDERR = "stderr"


@dataclass(frozen=True, slots=True)
class Assignment:
    """One committed lease: the attempt to run, its fencing token and all it needs to run.

    Datetimes are ISO-8601 text in UTC (as the cluster sends them) or "" when absent.
    """

    key: TaskKey
    token: int
    try_number: int
    kind: str  # "bash" | "python"
    command: str = ""  # bash
    env: tuple[tuple[str, str], ...] = ()  # bash: added to the worker's environment
    callable_name: str = ""  # python: "fn" or "Class.fn" in the DAG file
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # python
    fileloc: str = ""  # the DAG file (python tasks import it)
    execution_timeout: float | None = None  # seconds; None = no limit
    logical_date: str = ""
    data_interval_start: str = ""
    data_interval_end: str = ""
    conf: Mapping[str, Any] = field(default_factory=dict)
    # The declared variables and connections (worker.task_secrets), resolved just before the
    # attempt starts: (env name, value in clear text). Never in a repr.
    secret_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The DAG's params (DagSpec.params_json): {{ params }} of its templates (dags.templating)
    params_json: str = ""
    # The return values (XCom, JSON text) of its direct upstream tasks, by task id: its
    # TaskFlow arguments are resolved from them (dags.xcom_args)
    upstream_results: Mapping[str, str] = field(default_factory=dict)
    skip_on_exit_code: int | None = None  # bash: this exit code ends the attempt SKIPPED
    # A resumed deferral's {"method", "kwargs", "event"} as JSON text (dags.deferral)
    resume_json: str = ""
    # An asset-triggered run's events, JSON text ("" for other runs): RAFTSCHED_ASSET_EVENTS
    asset_events_json: str = ""

    def task_env(self) -> dict[str, str]:
        """The RAFTSCHED_* variables every attempt sees (added after the task's own env);
        an instance of a mapped task also gets its map index (RAFTSCHED_MAP_INDEX)."""
        index = mapping.split_id(self.key.task_id)[1]
        return {
            **({mapping.MAP_INDEX_ENV: str(index)} if index >= 0 else {}),
            "RAFTSCHED_DAG_ID": self.key.dag_id,
            "RAFTSCHED_RUN_ID": self.key.run_id,
            "RAFTSCHED_TASK_ID": self.key.task_id,
            "RAFTSCHED_TRY_NUMBER": str(self.try_number),
            # The lease's fencing token (the log index that granted it): a newer attempt of
            # the task always has a larger one, so an external system the task writes can
            # refuse a stale attempt's write (docs/fencing-side-effects.md)
            "RAFTSCHED_FENCING_TOKEN": str(self.token),
            "RAFTSCHED_LOGICAL_DATE": self.logical_date,
            "RAFTSCHED_DATA_INTERVAL_START": self.data_interval_start,
            "RAFTSCHED_DATA_INTERVAL_END": self.data_interval_end,
            "RAFTSCHED_CONF": json.dumps(dict(self.conf), sort_keys=True),
            **({ASSET_EVENTS_ENV: self.asset_events_json} if self.asset_events_json else {}),
        }


def describe(key: TaskKey) -> str:
    """``dag_id/run_id/task_id``: how log lines name an attempt."""
    return f"{key.dag_id}/{key.run_id}/{key.task_id}"


class WorkerTransport(Protocol):
    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        """Up to ``max_tasks`` new leases; waits up to ``wait_seconds`` for one (long poll)
        and returns [] when none came. Every lease returned is committed (invariant 3)."""
        ...

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        """Extend each (key, token) lease. False = refused (stale token): kill that attempt.
        A key missing from the answer is treated as not refused."""
        ...

    def complete(
        self, key: TaskKey, token: int, *, success: bool, exit_code: int | None, message: str
    ) -> bool:
        """Report the outcome of an attempt; False = refused (stale token): drop it. An
        outcome with an XCom also passes ``result_json``, ``follow`` and ``skipped``, one whose
        task set extras for its outlets' asset events ``outlet_extras``."""
        ...

    def append_logs(self, key: TaskKey, token: int, chunks: Sequence[tuple[str, str]]) -> bool:
        """Append (stream, text) chunks in order; the cluster numbers them. False = refused."""
        ...

    def resolve_secrets(
        self,
        key: TaskKey,
        token: int,
        worker_id: str,
        variables: Sequence[str],
        connections: Sequence[str],
        on_demand: bool = False,
    ) -> dict[tuple[str, str], str]:
        """The values of variables and connections the task of lease (key, token) declares
        (``on_demand``: reads without declaring, recorded by the node, secret_channel.py):
        (kind, name) -> value in clear text. RaftschedError when the cluster refuses (a stale
        token, a name not declared or not set), with a message that holds no value. Optional:
        a transport without it runs only tasks that declare none."""
        ...

    def release(self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]) -> None:
        """Hand leases back (worker shutting down) so they are queued again without waiting
        for them to expire. Best effort: an unanswered release just lets the lease expire."""
        ...

    def interrupt(self, call_timeout: float) -> None:
        """The worker is stopping. An outstanding ``lease()`` returns [] at once (grants it
        may have won meanwhile are lost to this worker and expire), later ones return []
        without asking, and every other call made from now on raises RaftschedError after
        at most ``call_timeout`` seconds unanswered. Calls already under way keep their own
        deadline. Idempotent; callable from any thread that is not inside a transport call
        (a signal handler of a thread that only waits)."""
        ...
