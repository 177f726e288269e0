"""The partition kit's hosts and network nemeses, for real: namespaces, a bridge, iptables.

Skipped unless root and ``ip netns`` works (CI runs as root, so there it runs). A tiny TCP
listener in one namespace answers connections from the others; isolating it with the
``isolate-leader`` nemesis makes connections time out (a silent drop, not a refusal); healing
restores them; teardown leaves no namespace, link or rule behind. Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import pytest

from scripts.partition import netns
from scripts.partition.nemesis import IsolateLeader, Loss, Timeline, execute
from scripts.partition.schedule import Step

REASON = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"netns unavailable: {REASON}")

PORT = 9311
LISTENER = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen(16)
while True:
    c, _ = s.accept()
    c.sendall(b"ok")
    c.close()
"""
CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print(s.recv(2).decode())
except TimeoutError:
    print("timeout")
except OSError as err:
    print(f"error {err.errno}")
"""


class FakeCluster:
    """The nemesis ``Cluster`` over bare hosts: node 0 "leads"; no processes, no DB."""

    def __init__(self, hosts: netns.Hosts) -> None:
        self.network = hosts
        self.hosts = hosts

    @property
    def names(self) -> Sequence[str]:
        return [h.name for h in self.hosts.hosts]

    def namespace(self, i: int) -> str:
        return self.hosts.hosts[i].namespace

    def address(self, i: int) -> str:
        return self.hosts.hosts[i].address

    def pid(self, i: int) -> int | None:
        return None

    def leader(self) -> int | None:
        return 0

    def kill(self, i: int) -> None: ...
    def restart(self, i: int) -> None: ...
    def stop_signal(self, i: int) -> None: ...
    def cont(self, i: int) -> None: ...

    def db_unavailable_reason(self) -> str | None:
        return "no DB"

    def db_stop(self) -> None: ...
    def db_start(self) -> None: ...


def connect(hosts: netns.Hosts, src: int, dst: int, timeout: float = 1.5) -> str:
    return hosts.run(
        src,
        [sys.executable, "-c", CONNECT, hosts.hosts[dst].address, str(PORT), str(timeout)],
        timeout=timeout + 15,
    ).strip()


def wait_connect(hosts: netns.Hosts, src: int, dst: int, deadline: float = 15.0) -> str:
    end = time.monotonic() + deadline
    answer = connect(hosts, src, dst)
    while answer != "ok" and time.monotonic() < end:
        time.sleep(0.2)
        answer = connect(hosts, src, dst)
    return answer


@pytest.fixture
def hosts() -> Iterator[netns.Hosts]:
    made = netns.Hosts(3, handle_signals=False)
    try:
        made.setup()
        listener = made.start(0, [sys.executable, "-c", LISTENER])
        assert listener.poll() is None
        yield made
    finally:
        run_id = made.run_id
        made.teardown()
        assert netns.leftovers(run_id) == []


def test_isolate_drops_silently_and_heal_restores(hosts: netns.Hosts) -> None:
    assert wait_connect(hosts, 1, 0) == "ok"
    assert wait_connect(hosts, 2, 0) == "ok"

    cluster = FakeCluster(hosts)
    nemesis = IsolateLeader()
    details = nemesis.start(cluster)
    assert details["side_a"] == ["n0"]
    assert len(hosts.rules(0)) == 4  # -s and -d for each of the two peers
    started = time.monotonic()
    assert connect(hosts, 1, 0, timeout=1.5) == "timeout"  # dropped, not refused
    assert time.monotonic() - started >= 1.4
    assert connect(hosts, 2, 0, timeout=1.5) == "timeout"

    nemesis.stop(cluster)
    assert hosts.rules(0) == []
    assert wait_connect(hosts, 1, 0) == "ok"


def test_schedule_execution_logs_and_heals_everything(hosts: netns.Hosts) -> None:
    cluster = FakeCluster(hosts)
    timeline = Timeline()
    steps = [
        Step(0.0, 0.5, 0.1, "loss", {"link": [1, 0], "probability": 1.0}),
        Step(0.6, 1.0, 0.1, "isolate-leader"),
        Step(1.1, 1.2, 0.1, "db-restart"),
    ]
    execute(steps, cluster, timeline)
    actions = [(e["nemesis"], e["action"]) for e in timeline.events]
    assert actions == [
        ("loss", "start"),
        ("loss", "stop"),
        ("isolate-leader", "start"),
        ("isolate-leader", "stop"),
        ("db-restart", "skip"),
    ]
    assert all(hosts.rules(i) == [] for i in range(3))
    assert wait_connect(hosts, 1, 0) == "ok"


def test_total_loss_on_a_link_drops_only_that_link(hosts: netns.Hosts) -> None:
    cluster = FakeCluster(hosts)
    nemesis = Loss({"link": [1, 0], "probability": 1.0})
    nemesis.start(cluster)
    try:
        assert connect(hosts, 1, 0, timeout=1.0) == "timeout"
        assert wait_connect(hosts, 2, 0) == "ok"
    finally:
        nemesis.stop(cluster)
    assert wait_connect(hosts, 1, 0) == "ok"


def test_teardown_is_idempotent_and_kills_our_processes() -> None:
    made = netns.Hosts(2, handle_signals=False)
    made.setup()
    proc = made.start(1, [sys.executable, "-c", "import time; time.sleep(600)"])
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert made.hosts[1].namespace in names
    made.teardown()
    made.teardown()
    assert proc.wait(timeout=15) != 0
    assert netns.leftovers(made.run_id) == []
