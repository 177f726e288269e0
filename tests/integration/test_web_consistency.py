"""One user, two webservers, two nodes: the page never goes back in time (issue #15).

Real processes: three scheduler nodes, the third lagging on purpose
(RAFTSCHED_TEST_APPLY_DELAY); webserver A talks only to a node that does not lag, webserver
B only to the lagging one. The user triggers a run through A and opens the run page through
B at once, many times: B must always show the run. What carries the guarantee is the index
in the signed session cookie (the same secret on both webservers, no sticky sessions).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from harness import WaitTimeout, free_ports, wait_for
from test_consistency import LAG_SECONDS, LAGGING_NODE
from webstack import ADMIN_TOKEN, API_OFFSET, PASSWORD, USERNAME, HttpSession, Process, WebStack

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import cluster_pb2
from tests.integration.node_hooks import APPLY_DELAY_ENV

pytestmark = pytest.mark.slow

DAG = """
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("web_lag", schedule=None, start_date=datetime(2024, 1, 1), max_active_runs=1000):
    BashTask("say", command="echo hello")
"""
TRIGGERS = 12


def api_of(stack: WebStack, index: int) -> str:
    host, port = stack.cluster.addresses[index].rsplit(":", 1)
    return f"{host}:{int(port) + API_OFFSET}"


def start_webserver(stack: WebStack, name: str, port: int, node: int) -> str:
    """``raftsched webserver`` on ``port`` whose gateway reaches only node ``node``."""
    env = {**stack.cluster.nodes[0].env, "RAFTSCHED__WEBSERVER__GRPC_SERVERS": api_of(stack, node)}
    log = stack.cluster.log_dir / f"web-{name}.log"
    bind = f"127.0.0.1:{port}"
    proc = Process(200 + port % 100, name, stack.cluster.config_path, log, env)
    proc.command = ["webserver", "--bind", bind, "--workers", "1"]
    proc.start()
    stack.cluster.extra.append(proc)
    url = f"http://{bind}"
    probe = HttpSession(url, timeout=2.0)
    wait_for(lambda: probe.get("/health")[0] == 200, timeout=60, what=f"{url}/health")
    return url


def test_a_run_triggered_through_one_webserver_is_on_the_other_ones_run_page(
    tmp_path: Path, sqlite_url: str
) -> None:
    stack = WebStack(tmp_path, sqlite_url, webservers=1, use_nginx=False, dags={"w.py": DAG})
    lagging = stack.cluster.nodes[LAGGING_NODE]
    lagging.env = {**lagging.env, APPLY_DELAY_ENV: str(LAG_SECONDS)}
    with stack:
        stack.cluster.start()
        leader = stack.cluster.wait_leader(timeout=60)
        fresh = next(i for i in range(3) if i not in (LAGGING_NODE,))
        with RaftschedClient([api_of(stack, i) for i in range(3)], token=ADMIN_TOKEN) as client:
            if leader == LAGGING_NODE:
                # The lagging leader applies late on purpose, so a transfer can be refused
                # (target not caught up) or not take on a loaded host: ask up to 3 times.
                target = stack.cluster.addresses[fresh]
                for attempt in range(3):
                    try:
                        client.cluster.TransferLeadership(
                            cluster_pb2.TransferLeadershipRequest(target=target)
                        )
                        stack.cluster.wait_leader(exclude={LAGGING_NODE}, timeout=20)
                        break
                    except (grpc.RpcError, WaitTimeout):
                        if attempt == 2:
                            raise
        stack.create_user(USERNAME, PASSWORD, "admin", timeout=60)
        port_a, port_b = free_ports(2)
        url_a = start_webserver(stack, "web-a", port_a, fresh)
        url_b = start_webserver(stack, "web-b", port_b, LAGGING_NODE)

        login = HttpSession(url_a)
        login.login(USERNAME, PASSWORD)
        through_a = HttpSession(url_a, follow=False, cookies=login.cookies)  # one browser
        through_b = HttpSession(url_b, cookies=login.cookies)
        wait_for(lambda: through_a.get("/dags/web_lag")[0] == 200, timeout=60, what="DAG on web A")
        missing = []
        for _ in range(TRIGGERS):
            status, headers, _body = through_a.post_form("/dags/web_lag/trigger", {"conf": "{}"})
            assert status == 302, f"trigger through A: {status}"
            run_path = urlsplit(headers.get("Location", "")).path
            assert run_path.startswith("/dags/web_lag/runs/"), headers
            status, _, page = through_b.get(run_path)
            if status != 200 or "say" not in page:
                missing.append(f"{run_path}: {status}")
        assert not missing, f"the run page through B missed {len(missing)} runs: {missing}"
