"""`raftsched worker`: lease tasks from the cluster and run them until SIGTERM.

Where the cluster is, first match wins: ``--server``, ``$RAFTSCHED_SERVER``, ``[worker]
servers``; the token likewise from ``--token``, ``$RAFTSCHED_TOKEN``, ``[worker] token``.
``--concurrency`` overrides ``[worker] concurrency``, ``--queues`` ``[worker] queues`` (the
task queues it leases from: only tasks whose ``queue=`` is one of them; "default" when not
set). TLS is on when ``[api] tls_ca`` is set.

Serves its Prometheus metrics on ``[worker] metrics_host:metrics_port`` (127.0.0.1:7401;
``worker/metrics.py``). Logs one line per attempt start and finish on stderr.

SIGTERM or Ctrl-C: stop leasing, let running attempts finish for up to ``[worker]
grace_period`` seconds, then kill them and hand their leases back; exit 0, a few seconds after
the grace period at most, even when no node answers any more. ``--noop`` (benchmarks):
complete every lease at once without running anything; ``--record FILE`` appends one JSON line
per lease with the moment it arrived.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from raftsched.cli.common import positive_int, setup_logging


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "worker",
        help="lease tasks from the cluster and run them",
        description="Lease tasks from the cluster and run each in a subprocess, heartbeating"
        " its lease and shipping its logs. SIGTERM stops it gracefully ([worker] grace_period).",
    )
    parser.add_argument(
        "--server",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gRPC addresses of the scheduler nodes (default: $RAFTSCHED_SERVER, else"
        " [worker] servers)",
    )
    parser.add_argument(
        "--token",
        help="API token with the worker role (default: $RAFTSCHED_TOKEN, else [worker] token)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help="attempts run at once (default: [worker] concurrency)",
    )
    parser.add_argument(
        "--queues",
        type=queue_list,
        metavar="QUEUE[,QUEUE...]",
        help="lease only tasks of these queues (a task's queue=; default: [worker] queues,"
        ' else "default")',
    )
    parser.add_argument("--worker-id", help="this worker's id (default: hostname:pid:random)")
    parser.add_argument(
        "--noop",
        action="store_true",
        help="benchmark mode: complete every lease at once without running the task",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="with --noop: append one JSON line per lease (key, token, arrived_at) to FILE",
    )
    parser.set_defaults(handler=run)


def queue_list(text: str) -> tuple[str, ...]:
    """``a,b`` -> ("a", "b"): each a queue name as a task's ``queue=`` takes it (a task id's
    characters and size), at most MAX_QUEUES_PER_WORKER, each once, in the order given."""
    from raftsched.core.limits import MAX_QUEUES_PER_WORKER
    from raftsched.dags.value_checks import ID_PATTERN

    names = tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if not names:
        raise argparse.ArgumentTypeError("names no queue")
    if len(names) > MAX_QUEUES_PER_WORKER:
        raise argparse.ArgumentTypeError(f"at most {MAX_QUEUES_PER_WORKER} queues")
    for name in names:
        if not ID_PATTERN.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"invalid queue {name[:60]!r}: use 1 to 250 letters, digits, '_', '.' and '-'"
            )
    return names


def resolve(
    args: argparse.Namespace, env: dict[str, str] | None = None
) -> tuple[list[str], str | None]:
    """(servers, token) from the flags, the environment and the config, first match wins."""
    from raftsched.addresses import cluster_api_addresses
    from raftsched.config import load_config

    env = dict(os.environ if env is None else env)
    settings = load_config(args.config, env)
    config = settings.worker
    text = args.server or env.get("RAFTSCHED_SERVER") or ",".join(config.servers)
    servers = [s.strip() for s in text.split(",") if s.strip()]
    if not servers:
        # The cluster this config describes: every node's gRPC address.
        servers = cluster_api_addresses(settings)
    token = args.token or env.get("RAFTSCHED_TOKEN") or config.token or None
    return servers, token


def run(args: argparse.Namespace) -> int:
    from raftsched.api.client import RaftschedClient
    from raftsched.config import load_config
    from raftsched.errors import WorkerRejected
    from raftsched.worker.grpc_transport import GrpcWorkerTransport
    from raftsched.worker.loop import Worker, WorkerSettings
    from raftsched.worker.sign_off import sign_off, worker_info

    config = load_config(args.config)
    servers, token = resolve(args)
    setup_logging(config.core.logging_level, config.core.log_format)
    log = logging.getLogger("raftsched.worker")
    cfg = config.worker
    from raftsched import taskenv

    allowlist = tuple(cfg.task_env_allowlist)
    if config.core.airflow_imports:  # its task processes alias `import airflow`
        from raftsched.airflow._imports import enable_for_tasks

        allowlist = enable_for_tasks(allowlist)
    taskenv.configure(allowlist)  # what task processes may see of our env
    taskenv.protect_this_process()  # before the first attempt: no task reads our environ
    from raftsched.worker import task_user

    user = task_user.resolve(cfg.run_as_user)  # TaskUserError: the worker does not start
    if user is not None and args.token:
        from raftsched.errors import TaskUserError

        raise TaskUserError(
            "[worker] run_as_user is set but the token came with --token: every process,"
            " the tasks' too, reads command lines in /proc; pass it in RAFTSCHED_TOKEN or"
            " [worker] token instead"
        )
    task_user.check_config_private(config.source, user)
    task_user.configure(user)
    settings = WorkerSettings(
        concurrency=args.concurrency or cfg.concurrency,
        lease_ttl=cfg.lease_ttl,
        heartbeat_interval=cfg.heartbeat_interval,
        grace_period=cfg.grace_period,
        noop=args.noop,
    )
    tls_ca = str(config.api.tls_ca) if config.api.tls_ca is not None else None
    try:
        queues = args.queues or queue_list(",".join(cfg.queues) or "default")
    except argparse.ArgumentTypeError as err:
        from raftsched.errors import ConfigError

        raise ConfigError(f"[worker] queues: {err}") from None
    # A node that swallows packets costs a heartbeat at most one interval before the next node
    # is tried, so a partitioned node alone never makes the worker fence healthy attempts.
    attempt = max(2.0, cfg.heartbeat_interval)
    client = RaftschedClient(servers, token=token, tls_ca=tls_ca, attempt_timeout=attempt)
    # Long polls get a client of their own: SIGTERM closes it to end an outstanding poll.
    poll_client = RaftschedClient(servers, token=token, tls_ca=tls_ca)
    transport = GrpcWorkerTransport(
        client,
        poll_client=poll_client,
        worker_id=args.worker_id or "",
        lease_ttl=cfg.lease_ttl,
        access={"servers": servers, "token": token, "tls_ca": tls_ca},  # the death report
        queues=queues,
    )
    transport.info = worker_info(settings.concurrency)  # the workers page
    record = _recorder(args.record) if args.record else None
    worker = Worker(transport, settings, worker_id=args.worker_id, record=record)
    from raftsched.logging_setup import set_node_id

    set_node_id(worker.worker_id)  # "node" of every log line
    if user is None and os.geteuid() == 0 and not args.noop:
        log.warning(
            "tasks run as root: they can read this worker's token and config; set [worker]"
            " run_as_user (nobody, or a dedicated user) to run them as another user"
        )
    elif user is not None:
        log.info("tasks run as user %s (uid %d)", user.name, user.uid)

    stopped_by: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping (grace %gs)", signal.Signals(signum).name, cfg.grace_period)
        stopped_by.append(signal.Signals(signum).name)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "worker %s leasing from %s, queues %s",
        worker.worker_id,
        ",".join(servers),
        ",".join(queues),
    )
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            worker.run()
        except WorkerRejected as err:
            failed.append(err)
        except Exception as err:
            log.exception("worker stopped by an unexpected error")
            failed.append(err)

    worker.metrics.serve(cfg.metrics_host, cfg.metrics_port)  # [worker] metrics_port 0: off
    thread = threading.Thread(target=loop, name="worker-loop")
    thread.start()
    try:
        while thread.is_alive():  # the main thread stays free for the signal handlers
            thread.join(0.5)
        why = f"stopped: {failed[0]}" if failed else f"stopped ({', '.join(stopped_by[:1])})"
        sign_off(client, worker.worker_id, why, transport.info)
    finally:
        client.close()  # ends any call still under way (each was bounded once stopping)
        poll_client.close()
        worker.metrics.close()
    if failed and isinstance(failed[0], WorkerRejected):
        raise failed[0]
    return 1 if failed else 0


def _recorder(path: str) -> Any:
    lock = threading.Lock()
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the process's life)

    def record(assignment: Any, arrived_at: float) -> None:
        line = json.dumps(
            {
                "dag_id": assignment.key.dag_id,
                "run_id": assignment.key.run_id,
                "task_id": assignment.key.task_id,
                "try_number": assignment.try_number,
                "token": assignment.token,
                "arrived_at": arrived_at,
            }
        )
        with lock:
            out.write(line + "\n")
            out.flush()

    return record
