"""WorkerService.ListWorkers and SignOff against a real cluster, on SQLite and PostgreSQL: a
worker stopped by SIGTERM signs off and is listed as lost with that reason (gRPC and `raftsched
workers list`); what a worker says about itself is bounded like everything a client sends.
(The kill -9 case, through the page: tests/browser/test_workers_page.py.)"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from api_harness import VIEWER, WORKER, ApiCluster
from harness import wait_for

from raftsched import __version__
from raftsched.api.gen import worker_pb2
from raftsched.cli.main import main
from raftsched.errors import ApiError

pytestmark = pytest.mark.slow


def test_a_stopped_worker_signs_off_and_bad_info_is_refused(
    tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with ApiCluster(tmp_path, db_url) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        viewer = cluster.client(VIEWER)
        worker = cluster.client(WORKER)
        proc = cluster.start_worker("w-term", concurrency=3, queues="default,io")

        def listed() -> list[worker_pb2.WorkerSummary]:
            response = viewer.workers.ListWorkers(worker_pb2.ListWorkersRequest())
            return [w for w in response.workers if w.worker_id == "w-term"]

        [live] = wait_for(listed, timeout=30, what="w-term among the live workers")
        assert live.info.pid == proc.pid and live.info.slots == 3
        assert list(live.queues) == ["default", "io"] and live.HasField("last_seen")

        base = ["--config", str(cluster.config_path), "--token", VIEWER, "workers", "list"]
        assert main(base) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == [
            *("WORKER_ID", "HOST", "PID", "VERSION", "QUEUES", "SLOTS", "RUNNING", "LAST_SEEN")
        ]
        [row] = [line.split() for line in table if line.startswith("w-term ")]
        assert row[2:6] == [str(proc.pid), __version__, "default,io", "0/3"] and row[6] == "-"

        proc.stop()  # SIGTERM: the worker signs off on its way out

        def lost() -> list[worker_pb2.WorkerSummary]:
            response = viewer.workers.ListWorkers(worker_pb2.ListWorkersRequest())
            return [w for w in response.lost if w.worker_id == "w-term"]

        [gone] = wait_for(lost, timeout=30, what="w-term among the lost workers")
        assert gone.lost_reason == "stopped (SIGTERM)" and gone.info.pid == proc.pid
        assert not listed()
        assert main(base) == 0
        out = capsys.readouterr().out
        assert "lost in the last 10 minutes" in out and "stopped (SIGTERM)" in out

        # What a worker says about itself is bounded: INVALID_ARGUMENT naming the field.
        too_long = worker_pb2.WorkerInfo(host="h" * 256)
        lease = worker_pb2.LeaseRequest(worker_id="w-bad", max_tasks=1, info=too_long)
        with pytest.raises(ApiError) as info:
            worker.workers.Lease(lease)
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "info.host" in str(info.value)
        with pytest.raises(ApiError) as info:
            worker.workers.SignOff(worker_pb2.SignOffRequest(worker_id=""))
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(ApiError) as info:  # a viewer may read, not sign a worker off
            viewer.workers.SignOff(worker_pb2.SignOffRequest(worker_id="w-x", reason="no"))
        assert info.value.code is grpc.StatusCode.PERMISSION_DENIED
