"""`raftsched triggerer`: lease the triggers of deferred tasks and run them (any number of
triggerers, on any machine, like workers; docs/architecture.md §17)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import uuid
from types import FrameType

from raftsched.cli.common import positive_int, setup_logging


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "triggerer",
        help="run the triggers deferred tasks wait on",
        description="Lease the triggers of deferred tasks from the cluster, run them in one"
        " asyncio loop and report each firing; the task then resumes on a worker. It"
        " authenticates with a worker token ([worker] servers and token).",
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
        "--capacity",
        type=positive_int,
        metavar="N",
        help="triggers run at once (default: [triggerer] capacity)",
    )
    parser.add_argument("--triggerer-id", help="this triggerer's id (default: hostname:pid)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from raftsched.api.client import RaftschedClient
    from raftsched.cli.worker_cmd import resolve
    from raftsched.config import load_config
    from raftsched.triggerer.loop import Triggerer, TriggererSettings
    from raftsched.triggerer.transport import GrpcTriggererTransport

    config = load_config(args.config)
    servers, token = resolve(args)
    setup_logging(config.core.logging_level, config.core.log_format)
    log = logging.getLogger("raftsched.triggerer")
    cfg = config.triggerer
    triggerer_id = args.triggerer_id or (
        f"triggerer:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    )
    tls_ca = str(config.api.tls_ca) if config.api.tls_ca is not None else None
    attempt = max(2.0, cfg.heartbeat_interval)
    client = RaftschedClient(servers, token=token, tls_ca=tls_ca, attempt_timeout=attempt)
    poll_client = RaftschedClient(servers, token=token, tls_ca=tls_ca)
    transport = GrpcTriggererTransport(
        client, triggerer_id, poll_client=poll_client, lease_ttl=cfg.lease_ttl
    )
    settings = TriggererSettings(
        capacity=args.capacity or cfg.capacity,
        lease_ttl=cfg.lease_ttl,
        heartbeat_interval=cfg.heartbeat_interval,
    )
    triggerer = Triggerer(transport, settings)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        triggerer.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("triggerer %s leasing from %s", triggerer_id, ",".join(servers))
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            triggerer.run()
        except Exception as err:
            log.exception("triggerer stopped by an unexpected error")
            failed.append(err)

    thread = threading.Thread(target=loop, name="triggerer-loop")
    thread.start()
    try:
        while thread.is_alive():  # the main thread stays free for the signal handlers
            thread.join(0.5)
    finally:
        client.close()
        poll_client.close()
    return 1 if failed else 0
