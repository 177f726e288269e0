"""The triggerer's loop against a fake cluster: it runs leased triggers in one asyncio loop,
reports each firing once (sending it again while the call fails, dropping it once its lease
is over), reports a raising trigger's traceback instead of stopping, and cancels a trigger
whose renewal the cluster refuses."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from raftsched.core.model import TaskKey
from raftsched.errors import TriggerError
from raftsched.triggerer import triggers
from raftsched.triggerer.loop import Triggerer, TriggererSettings
from raftsched.triggerer.transport import Firing, TriggerGrant


class FakeCluster:
    def __init__(self, grants: list[TriggerGrant]) -> None:
        self.grants = list(grants)
        self.fired: list[Firing] = []
        self.refuse_renewal: set[TaskKey] = set()
        self.lock = threading.Lock()

    def lease(self, most: int, wait: float) -> list[TriggerGrant]:
        with self.lock:
            out, self.grants = self.grants[:most], self.grants[most:]
        if not out:
            threading.Event().wait(0.05)
        return out

    def heartbeat(self, refs: list[tuple[TaskKey, int]]) -> list[bool]:
        return [key not in self.refuse_renewal for key, _ in refs]

    def fire(self, firings: list[Firing]) -> list[str]:
        with self.lock:
            self.fired.extend(firings)
        return [""] * len(firings)


def grant(name: str, kind: str, args: dict) -> TriggerGrant:
    return TriggerGrant(TaskKey("d", "r", name), 7, 1, kind, json.dumps(args), "/dags/x.py")


def run_until(triggerer: Triggerer, done, timeout: float = 20.0) -> None:
    thread = threading.Thread(target=triggerer.run)
    thread.start()
    try:
        for _ in range(int(timeout / 0.05)):
            if done():
                break
            threading.Event().wait(0.05)
    finally:
        triggerer.stop()
        thread.join(10)
    assert done()


def test_fires_once_each_and_reports_errors(tmp_path: Path) -> None:
    (tmp_path / "here").write_text("abc")
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    cluster = FakeCluster(
        [
            grant("file", "file", {"filepath": str(tmp_path / "here"), "poke_interval": 1}),
            grant("time", "time", {"moment": past}),
            grant("bad", "no-such-kind", {}),
            grant("user", "user:nomodule_here.Cls", {}),
        ]
    )
    triggerer = Triggerer(cluster, TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05))
    run_until(triggerer, lambda: len(cluster.fired) == 4)
    by_task = {f.key.task_id: f for f in cluster.fired}
    assert json.loads(by_task["file"].event_json) == {"path": str(tmp_path / "here"), "size": 3}
    assert json.loads(by_task["time"].event_json) == past
    assert "TriggerError: unknown trigger kind" in by_task["bad"].error
    assert "ModuleNotFoundError" in by_task["user"].error
    assert (triggerer.counters.fired, triggerer.counters.errors) == (2, 2)


def test_a_refused_renewal_cancels_the_trigger(tmp_path: Path) -> None:
    waiting = grant("w", "file", {"filepath": str(tmp_path / "never"), "poke_interval": 1})
    cluster = FakeCluster([waiting])
    cluster.refuse_renewal.add(waiting.key)
    triggerer = Triggerer(cluster, TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05))
    run_until(triggerer, lambda: triggerer.counters.refused >= 1)
    assert cluster.fired == [] and triggerer.counters.running == 0


def test_a_user_defined_trigger_runs_from_the_dag_folder(tmp_path: Path) -> None:
    (tmp_path / "my_triggers.py").write_text(
        "class Ready:\n"
        "    def __init__(self, value):\n"
        "        self.value = value\n"
        "    async def run(self):\n"
        "        yield {'value': self.value}\n"
    )
    event = asyncio.run(
        triggers.run_trigger("user:my_triggers.Ready", '{"value": 5}', str(tmp_path / "d.py"))
    )
    assert json.loads(event) == {"value": 5}
    with pytest.raises(TriggerError):
        asyncio.run(triggers.run_trigger("user:nodot", "{}", str(tmp_path / "d.py")))


def test_the_http_trigger_fires_on_the_status_and_body_it_waits_for() -> None:
    import http.server

    answers = iter([(503, b"busy"), (200, b"not yet"), (200, b"state: ready")])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = next(answers, (200, b"state: ready"))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/health"
        args = {"url": url, "status": 200, "body_contains": "ready", "poke_interval": 1}
        event = asyncio.run(triggers.run_trigger("http", json.dumps(args), "/dags/d.py"))
        assert json.loads(event) == {"status": 200, "body": "state: ready"}
        with pytest.raises(TriggerError, match="http"):
            asyncio.run(triggers.run_trigger("http", '{"url": "file:///etc/passwd"}', "/d.py"))
    finally:
        server.shutdown()


class FlakyCluster(FakeCluster):
    """FireTriggers fails its first ``failures`` calls (a failover: no node answers)."""

    def __init__(self, grants: list[TriggerGrant], failures: int) -> None:
        super().__init__(grants)
        self.failures = failures
        self.fire_calls = 0

    def fire(self, firings: list[Firing]) -> list[str]:
        with self.lock:
            self.fire_calls += 1
            if self.fire_calls <= self.failures:
                raise ConnectionError("no node answered")
        return super().fire(firings)


def test_a_failed_firing_is_sent_again_until_it_lands() -> None:
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    cluster = FlakyCluster([grant("time", "time", {"moment": past})], failures=2)
    settings = TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05, lease_ttl=30)
    triggerer = Triggerer(cluster, settings)
    run_until(triggerer, lambda: len(cluster.fired) == 1)
    assert cluster.fire_calls == 3
    assert (triggerer.counters.fired, triggerer.counters.running) == (1, 0)


def test_a_firing_that_never_lands_is_dropped_once_its_lease_is_over() -> None:
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    cluster = FlakyCluster([grant("time", "time", {"moment": past})], failures=10**6)
    settings = TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05, lease_ttl=1.2)
    triggerer = Triggerer(cluster, settings)
    c = triggerer.counters
    run_until(triggerer, lambda: c.leased == 1 and cluster.fire_calls >= 2 and c.running == 0)
    assert cluster.fired == [] and c.fired == 0


def test_a_trigger_that_raises_anything_fails_its_task_never_the_triggerer(
    tmp_path: Path,
) -> None:
    """A user trigger raising mid-wait (even SystemExit, which asyncio would let out of the
    loop) is reported with its traceback; the triggerer runs on and fires the others."""
    (tmp_path / "bad_triggers.py").write_text(
        "import asyncio, sys\n"
        "class Boom:\n"
        "    async def run(self):\n"
        "        await asyncio.sleep(0.2)\n"
        "        raise RuntimeError('boom in run')\n"
        "class Quits:\n"
        "    async def run(self):\n"
        "        await asyncio.sleep(0.2)\n"
        "        sys.exit(3)\n"
    )
    fileloc = str(tmp_path / "dag.py")
    later = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    cluster = FakeCluster(
        [
            TriggerGrant(TaskKey("d", "r", "boom"), 7, 1, "user:bad_triggers.Boom", "{}", fileloc),
            TriggerGrant(TaskKey("d", "r", "quit"), 7, 1, "user:bad_triggers.Quits", "{}", fileloc),
            grant("time", "time", {"moment": later}),
        ]
    )
    triggerer = Triggerer(cluster, TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05))
    run_until(triggerer, lambda: len(cluster.fired) == 3)
    by_task = {f.key.task_id: f for f in cluster.fired}
    assert (
        "Traceback" in by_task["boom"].error
        and "RuntimeError: boom in run" in by_task["boom"].error
    )
    assert "SystemExit: 3" in by_task["quit"].error
    assert json.loads(by_task["time"].event_json) == later
    assert (triggerer.counters.fired, triggerer.counters.errors) == (1, 2)


def test_renewals_go_in_batches_a_command_can_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raftsched.triggerer import loop

    monkeypatch.setattr(loop, "HEARTBEAT_BATCH", 2)
    waiting = [
        grant(f"w{i}", "file", {"filepath": str(tmp_path / "never"), "poke_interval": 1})
        for i in range(5)
    ]
    cluster = FakeCluster(waiting)
    batches: list[list[TaskKey]] = []
    renew = cluster.heartbeat

    def heartbeat(refs: list[tuple[TaskKey, int]]) -> list[bool]:
        batches.append([key for key, _ in refs])
        return renew(refs)

    cluster.heartbeat = heartbeat  # type: ignore[method-assign]
    triggerer = Triggerer(cluster, TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05))
    run_until(triggerer, lambda: len({k for b in batches for k in b}) == 5 and len(batches) >= 3)
    assert max(len(b) for b in batches) == 2


def test_an_event_the_cluster_would_refuse_fails_its_task_not_the_others(tmp_path: Path) -> None:
    """FireTriggers refuses a whole call holding an event past 64 KiB (or nested too deep);
    the triggerer checks each event first, so one oversized event fails its own task with
    the reason, and the firings beside it count."""
    (tmp_path / "big_triggers.py").write_text(
        "class Big:\n"
        "    async def run(self):\n"
        "        return 'x' * 70_000\n"
        "class Deep:\n"
        "    async def run(self):\n"
        "        value = 1\n"
        "        for _ in range(40):\n"
        "            value = [value]\n"
        "        return value\n"
    )
    fileloc = str(tmp_path / "dag.py")
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()

    class StrictCluster(FakeCluster):
        def fire(self, firings: list[Firing]) -> list[str]:
            if any(len(f.event_json) > 65_536 or f.event_json.count("[") > 16 for f in firings):
                raise ValueError("INVALID_ARGUMENT: firings[0].event_json is too large")
            return super().fire(firings)

    cluster = StrictCluster(
        [
            TriggerGrant(TaskKey("d", "r", "big"), 7, 1, "user:big_triggers.Big", "{}", fileloc),
            TriggerGrant(TaskKey("d", "r", "deep"), 7, 1, "user:big_triggers.Deep", "{}", fileloc),
            grant("time", "time", {"moment": past}),
        ]
    )
    settings = TriggererSettings(heartbeat_interval=0.1, poll_wait=0.05, lease_ttl=2.0)
    triggerer = Triggerer(cluster, settings)
    run_until(triggerer, lambda: len(cluster.fired) == 3)
    by_task = {f.key.task_id: f for f in cluster.fired}
    assert "event" in by_task["big"].error and by_task["big"].event_json == "null"
    assert "deeper" in by_task["deep"].error
    assert json.loads(by_task["time"].event_json) == past
