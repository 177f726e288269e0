"""A dead worker's last words: report the attempts it held as failed, so they are retried now.

Started by the task supervisor (``supervisor.py``, ``Server._report_death``) once the worker
died (kill -9 included) and the supervisor saw every process of every attempt gone: it is the
subreaper of them all, so "no child left" means nothing of them runs any more. Then, and only
then, a failed outcome is true and safe to report: the cluster may lease the task again at
once without two attempts ever overlapping (docs/architecture.md §11). Each report is a
``Complete`` fenced by the lease's token and the worker's id, exactly as the worker would have
sent it: one that comes after the lease expired, or after the worker's own report, is refused
and changes nothing.

    python -m raftsched.worker._last_words CONFIG_FD WORKER_PID   (stdin: {"held", "polls"})

``CONFIG_FD`` is the memfd the worker armed its supervisor with (``Executor.arm``): JSON with
``servers``, ``token``, ``tls_ca``, ``worker_id`` and ``lease_ttl``. ``polls`` are the worker's
calls in flight that lease (request id, max_tasks): its last Lease, and its last CompleteBatch
that asked for more tasks; what they granted and the worker never held is handed back (see
:func:`_replay`). Best effort and bounded: it gives up once the leases would have
expired anyway (``lease_ttl``), and never raises. Its log lines go to the worker's stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

log = logging.getLogger("raftsched.worker.last_words")

CALL_DEADLINE = 5.0  # seconds per report, retries on other nodes included
ATTEMPT_TIMEOUT = 2.0  # a node that swallows packets costs this before the next is tried


def _read_all(fd: int) -> bytes:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def message(worker_pid: int) -> str:
    return (
        f"the worker process (pid {worker_pid}) died while the attempt ran; its task"
        " supervisor killed every process of the attempt, then reported it as failed"
    )


def report(
    config: dict[str, Any],
    leases: list[dict[str, Any]],
    worker_pid: int,
    polls: list[dict[str, Any]] | None = None,
) -> int:
    """Report each lease as a failed attempt, then hand back what ``polls`` (the worker's
    calls in flight that lease: its Lease, a CompleteBatch asking for more) granted that the
    worker never held; the number of attempts the cluster accepted as failed."""
    from raftsched import retry
    from raftsched.api.client import RaftschedClient
    from raftsched.core.model import TaskKey
    from raftsched.errors import RaftschedError
    from raftsched.worker.grpc_transport import GrpcWorkerTransport

    client = RaftschedClient(
        [str(s) for s in config.get("servers") or ()],
        token=config.get("token") or None,
        tls_ca=config.get("tls_ca") or None,
        deadline=CALL_DEADLINE,
        attempt_timeout=ATTEMPT_TIMEOUT,
    )
    transport = GrpcWorkerTransport(client, worker_id=str(config.get("worker_id") or ""))
    give_up = time.monotonic() + float(config.get("lease_ttl") or 30.0)
    accepted = 0
    try:
        for lease in leases:
            key = TaskKey(str(lease["dag_id"]), str(lease["run_id"]), str(lease["task_id"]))
            token = int(lease["token"])
            what = f"{key.dag_id}/{key.run_id}/{key.task_id} (token {token})"
            tries = 0
            while True:
                try:
                    ok = transport.complete(
                        key, token, success=False, exit_code=None, message=message(worker_pid)
                    )
                except RaftschedError as err:
                    tries += 1
                    backoff = retry.backoff(tries, initial=0.1, maximum=1.0)
                    if time.monotonic() + backoff >= give_up:
                        log.info("death of the worker not reported for %s: %s", what, err)
                        break
                    time.sleep(backoff)
                    continue
                if ok:
                    accepted += 1
                    log.info("reported %s as failed: its worker died", what)
                else:
                    log.info("%s: the lease had already ended; nothing to report", what)
                break
        held = {
            (str(x["dag_id"]), str(x["run_id"]), str(x["task_id"]), int(x["token"])) for x in leases
        }
        for poll in polls or ():
            if poll.get("request_id"):
                _replay(transport, config, poll, held)
        _sign_off(client, config, worker_pid, accepted)
    finally:
        client.close()
    return accepted


def _sign_off(client: Any, config: dict[str, Any], worker_pid: int, accepted: int) -> None:
    """The workers page lists the worker as lost, with this reason (``worker/sign_off.py``)."""
    from google.protobuf.json_format import ParseDict, ParseError

    from raftsched.api.gen import worker_pb2
    from raftsched.worker.sign_off import sign_off

    try:
        info = ParseDict(config["info"], worker_pb2.WorkerInfo()) if config.get("info") else None
    except (ParseError, TypeError):
        info = None
    reason = (
        f"the worker process (pid {worker_pid}) died; its task supervisor killed what it ran"
        f" and reported {accepted} attempt(s) as failed"
    )
    sign_off(client, str(config.get("worker_id") or ""), reason, info)


def _replay(transport: Any, config: dict[str, Any], poll: dict[str, Any], held: set[Any]) -> None:
    """The worker's last Lease again, with its request id: the cluster answers a repeat with
    the grants it committed for it (the worker died before it held them, so nothing of them
    started) or, if none, with a fresh Lease for the dead worker; either way each grant is
    handed back unstarted (Release: no attempt used up), instead of expiring after its TTL."""
    from raftsched.api.gen import worker_pb2
    from raftsched.errors import RaftschedError
    from raftsched.worker.grpc_transport import assignment_from

    worker_id = str(config.get("worker_id") or "")
    request = worker_pb2.LeaseRequest(
        worker_id=worker_id,
        max_tasks=max(1, int(poll.get("max_tasks") or 1)),
        wait_seconds=0,
        lease_ttl_seconds=float(config.get("lease_ttl") or 0),
        request_id=str(poll["request_id"]),
        queues=[str(q) for q in config.get("queues") or ()],
    )
    try:
        response = transport.client.workers.Lease(request, timeout=CALL_DEADLINE)
        grants = [assignment_from(lease) for lease in response.leases]
        back = [
            (a.key, a.token)
            for a in grants
            if (a.key.dag_id, a.key.run_id, a.key.task_id, a.token) not in held
        ]
        if back:
            transport.release(worker_id, back)
            log.info("handed back %d lease(s) the dead worker never received", len(back))
    except (RaftschedError, ValueError) as err:
        log.info("the dead worker's last poll was not replayed (its grants expire): %s", err)


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    try:
        from raftsched import taskenv

        taskenv.protect_this_process()  # before it reads the token: no task reads our memory
        config = json.loads(_read_all(int(argv[0])))
        worker_pid = int(argv[1]) if len(argv) > 1 else 0
        state = json.loads(sys.stdin.buffer.read() or b"{}")
        if not isinstance(config, dict) or not isinstance(state, dict):
            raise ValueError("expected JSON objects (config; held leases and last poll)")
        leases = [x for x in state.get("held") or () if isinstance(x, dict)]
        polls = [x for x in state.get("polls") or () if isinstance(x, dict)]
        if isinstance(state.get("poll"), dict):  # a supervisor of the release before
            polls.append(state["poll"])
        report(config, leases, worker_pid, polls)
    except Exception:
        log.exception("the dead worker's attempts could not be reported; their leases expire")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
