"""ClusterService on a running cluster: transfer leadership, then add and remove a 4th node,
while 1-second DAGs keep running on a no-op worker."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from api_harness import ApiCluster
from harness import Node, child_env, config_text, second_dags, utcnow, wait_for

from raftsched.api.gen import cluster_pb2
from raftsched.errors import ApiError

pytestmark = pytest.mark.slow


def _call_code(call: object) -> grpc.StatusCode:
    with pytest.raises(ApiError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def test_transfer_leadership_and_membership_while_dags_run(tmp_path: Path, sqlite_url: str) -> None:
    dags = second_dags(2, start=utcnow() - timedelta(seconds=5), end=None)
    with ApiCluster(tmp_path, sqlite_url, dags=dags, spare=1) as cluster:
        cluster.start()
        leader = cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"every_second_0", "every_second_1"})
        cluster.start_worker("noop", noop=True, concurrency=4)
        wait_for(lambda: len(cluster.runs()) >= 4, timeout=60, what="runs in the DB")

        # -- transfer leadership to a chosen follower ----------------------------------------
        target = next(i for i in range(3) if i != leader)
        address = cluster.addresses[target]
        moved = client.cluster.TransferLeadership(
            cluster_pb2.TransferLeadershipRequest(target=address)
        )
        assert moved.leader_id == address
        assert cluster.wait_leader(exclude={leader}) == target
        code = _call_code(
            lambda: client.cluster.TransferLeadership(
                cluster_pb2.TransferLeadershipRequest(target="127.0.0.1:1")
            )
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT

        # -- add a 4th node, started with the new membership ---------------------------------
        spare = cluster.spare_addresses[0]
        sections = copy.deepcopy(cluster.sections)
        sections["cluster"]["nodes"] = ",".join([*cluster.addresses, spare])
        spare_config = tmp_path / "spare.cfg"
        spare_config.write_text(config_text(sections))
        node = Node(3, spare, spare_config, cluster.log_dir / "node-3.log", child_env())
        cluster.extra.append(node)
        node.start()
        added = client.cluster.AddNode(cluster_pb2.AddNodeRequest(address=spare))
        assert spare in added.nodes and len(added.nodes) == 4
        code = _call_code(lambda: client.cluster.AddNode(cluster_pb2.AddNodeRequest(address=spare)))
        assert code is grpc.StatusCode.ALREADY_EXISTS

        def caught_up() -> bool:
            nodes = client.cluster.GetStatus(cluster_pb2.GetStatusRequest()).nodes
            new = [n for n in nodes if n.address == spare]
            return (
                len(nodes) == 4
                and bool(new)
                and new[0].role == cluster_pb2.NODE_ROLE_FOLLOWER
                and new[0].applied_index > 0
                and new[0].lag < 50
            )

        wait_for(caught_up, timeout=60, what="the new node to catch up")

        # -- remove it again; the leader itself cannot be removed ---------------------------
        code = _call_code(
            lambda: client.cluster.RemoveNode(cluster_pb2.RemoveNodeRequest(address=address))
        )
        assert code is grpc.StatusCode.FAILED_PRECONDITION
        removed = client.cluster.RemoveNode(cluster_pb2.RemoveNodeRequest(address=spare))
        assert sorted(removed.nodes) == sorted(cluster.addresses)
        node.stop()
        status = client.cluster.GetStatus(cluster_pb2.GetStatusRequest())
        assert sorted(n.address for n in status.nodes) == sorted(cluster.addresses)

        # -- the DAGs kept running through all of it -----------------------------------------
        before = len(cluster.runs())
        wait_for(lambda: len(cluster.runs()) >= before + 4, timeout=60, what="more runs")
        cluster.wait_caught_up(timeout=60)
        cluster.assert_replicas_agree()
