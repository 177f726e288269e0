"""The worker's callback runner: leases callback jobs and runs them, one at a time.

A callback job (``core/callbacks.py``: on_failure_callback & co., deadline alerts, built-in
notifiers) runs through the normal Python-attempt path (``runner.Attempt``: the DAG file's
fork server, a scrubbed environment, a fresh work dir), as a PythonTask whose kwargs carry
the context dict (``_run_callback``), killed after :data:`CALLBACK_TIMEOUT`. A notifier's
connection (``conn_id``) is fetched for its job's lease only, and masked in its output. Its
output (at most :data:`MAX_OUTPUT_CHARS`) and outcome go back with ``CompleteCallback``; the
cluster appends them to the log of the event's task (or of ``__callbacks__``).

Runs on its own thread beside the task slots (a callback is short and bounded, and must not
wait behind long tasks). It never retries a callback: a reported outcome is final. Should the
worker die meanwhile, the job's lease expires and another worker takes it (a few times at
most, ``callback_table.MAX_ATTEMPTS``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from typing import Any

from raftsched import retry
from raftsched.core.callbacks import RUN_LOG_TASK_ID, declared_connection
from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError
from raftsched.secrets import conn_env
from raftsched.worker._run_callback import CALLBACK_KEY, encode_payload
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

log = logging.getLogger(__name__)

CALLBACK_TIMEOUT = 60.0  # seconds a callback may run
LEASE_TTL_MARGIN = 60.0  # its lease outlives the timeout by this much (no heartbeats)
LEASE_WAIT = 20.0  # long: the node proposes at once when a job comes, and once per call
MAX_OUTPUT_CHARS = 60_000
MAX_BACKOFF = 5.0


def assignment_for(job: Any) -> Assignment:
    """A ``CallbackLease`` as the Python attempt that runs it."""
    key = TaskKey(job.key.dag_id, job.key.run_id, job.key.task_id or RUN_LOG_TASK_ID)
    context = json.loads(job.context_json or "{}")
    return callback_assignment(key, job.token, job.try_number, job, context)


def callback_assignment(
    key: TaskKey, token: int, try_number: int, job: Any, context: dict[str, Any]
) -> Assignment:
    """The Python attempt that calls ``job.callable`` (with ``job.kwargs_json``, a
    notifier's settings, from DAG file ``job.fileloc``) with ``context``."""
    settings = json.loads(job.kwargs_json or "{}")
    return Assignment(
        key=key,
        token=token,
        try_number=try_number,
        kind="python",
        callable_name=job.callable,
        kwargs={CALLBACK_KEY: encode_payload(context, settings)},
        fileloc=job.fileloc,
        execution_timeout=CALLBACK_TIMEOUT,
        logical_date=str(context.get("logical_date") or ""),
        data_interval_start=str(context.get("data_interval_start") or ""),
        data_interval_end=str(context.get("data_interval_end") or ""),
        conf=context.get("conf") or {},
    )


class CallbackRunner:
    """Leases and runs callback jobs until :meth:`stop`. ``transport`` needs
    ``lease_callbacks`` and ``complete_callback`` (``GrpcWorkerTransport``)."""

    def __init__(self, transport: Any, worker_id: str, *, lease_wait: float = LEASE_WAIT) -> None:
        self.transport = transport
        self.worker_id = worker_id
        self.lease_wait = lease_wait
        self.lease_ttl = CALLBACK_TIMEOUT + LEASE_TTL_MARGIN  # the server's default TTL
        self._stopping = threading.Event()
        self._current: Attempt | None = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name="callbacks", daemon=True)

    @classmethod
    def for_worker(cls, transport: Any, worker_id: str, noop: bool) -> CallbackRunner | None:
        """A runner, unless the transport cannot lease callbacks (a test's fake) or the worker
        runs nothing (noop)."""
        if noop or not callable(getattr(transport, "lease_callbacks", None)):
            return None
        return cls(transport, worker_id)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop leasing; a callback under way may finish (see :meth:`finish`)."""
        self._stopping.set()

    def finish(self, grace_ends: float) -> None:
        """Wait until ``grace_ends`` (``time.monotonic()``; at most CALLBACK_TIMEOUT from now)
        for the callback under way, then kill it (not reported: its lease expires and
        another worker takes it)."""
        self.stop()
        with self._lock:
            busy = self._current is not None  # else it only polls: nothing to wait for
        if busy and self.thread.is_alive():
            left = min(grace_ends - time.monotonic(), CALLBACK_TIMEOUT)
            self.thread.join(max(0.0, left))
        with self._lock:
            if self._current is not None:
                self._current.kill("killed: the worker is shutting down")
        if self.thread.is_alive():
            self.thread.join(1.0)

    def run(self) -> None:
        failures, backoff = 0, 0.0  # failed lease calls in a row; the wait before the next
        while not self._stopping.is_set():
            try:
                jobs = self.transport.lease_callbacks(self.worker_id, 1, self.lease_wait)
                failures, backoff = 0, 0.0
            except RaftschedError as err:
                failures += 1
                backoff = retry.backoff(failures, initial=0.5, maximum=MAX_BACKOFF)
                log.info("no callback lease: %s (again in %.1fs)", err, backoff)
                jobs = []
            except Exception:
                failures += 1
                backoff = retry.backoff(failures, initial=0.5, maximum=MAX_BACKOFF)
                log.exception("callback lease failed (again in %.1fs)", backoff)
                jobs = []
            for job in jobs:
                if self._stopping.is_set():
                    break  # not run: its lease expires and another worker takes it
                self.run_job(job)
            self._stopping.wait(backoff)

    def run_job(self, job: Any) -> None:
        started = time.monotonic()
        output: list[str] = []
        size = [0]

        def sink(stream: str, text: str) -> None:
            if size[0] < MAX_OUTPUT_CHARS:
                output.append(text[: MAX_OUTPUT_CHARS - size[0]])
                size[0] += len(text)

        try:
            a = self._with_connection(job, assignment_for(job))
            attempt = Attempt(a, sink)
            with self._lock:
                self._current = attempt
            if self._stopping.is_set():
                attempt.kill("killed: the worker is shutting down")
            outcome = attempt.run()
            success, message, killed = outcome.success, outcome.message, outcome.killed
        except RaftschedError as err:
            success, message, killed = False, f"cannot run the callback: {err}", False
        except Exception as err:
            log.exception("running callback job %s failed", job.job_id)
            success, message, killed = False, f"the worker could not run it: {err}", False
        finally:
            with self._lock:
                self._current = None
        if killed:
            log.info("callback job %s killed: %s (not reported)", job.job_id, message)
            return
        text = "".join(output)
        if size[0] > MAX_OUTPUT_CHARS:
            text += f"\n(output cut at {MAX_OUTPUT_CHARS} characters)\n"
        log.info(
            "callback %s (%s) %s after %.1fs%s",
            job.job_id,
            job.callable,
            "succeeded" if success else "failed",
            time.monotonic() - started,
            f": {message}" if message else "",
        )
        self._report(job, success, message, text, started)

    def _with_connection(self, job: Any, a: Assignment) -> Assignment:
        """The notifier's connection in the attempt's environment (and its maskers)."""
        conn_id = declared_connection(job.kwargs_json)
        if not conn_id:
            return a
        from raftsched.worker.task_secrets import DEFAULT_BACKENDS

        for backend in DEFAULT_BACKENDS:
            value = backend.get("connection", conn_id)
            if value is not None:
                return replace(a, secret_env=((conn_env(conn_id), value),))
        resolve = getattr(self.transport, "resolve_secrets", None)
        if resolve is None:
            raise RaftschedError("this worker's transport cannot fetch connections")
        values = resolve(a.key, job.token, self.worker_id, [], [conn_id])
        value = values.get(("connection", conn_id))
        if value is None:
            raise RaftschedError(f"the cluster did not answer connection {conn_id}")
        return replace(a, secret_env=((conn_env(conn_id), value),))

    def _report(self, job: Any, success: bool, message: str, output: str, leased_at: float) -> None:
        """CompleteCallback, retried while the job's lease may still be ours (a failover
        takes a few seconds). A retry after a lost answer is refused (the job is done), so
        its output lands once; only an outcome that never lands lets the lease expire."""
        give_up = leased_at + self.lease_ttl - 10.0  # the lease ends a little later
        tries = 0
        while True:
            try:
                accepted = self.transport.complete_callback(
                    self.worker_id,
                    job.job_id,
                    job.token,
                    success=success,
                    message=message,
                    output=output,
                )
            except RaftschedError as err:
                log.info("outcome of callback %s not reported yet: %s", job.job_id, err)
            else:
                if not accepted:
                    log.info("outcome of callback %s refused: its lease is gone", job.job_id)
                return
            tries += 1
            backoff = retry.backoff(tries, initial=0.2, maximum=MAX_BACKOFF)
            if time.monotonic() + backoff > give_up or self._stopping.is_set():
                log.warning("outcome of callback %s dropped: no answer in time", job.job_id)
                return
            time.sleep(backoff)
