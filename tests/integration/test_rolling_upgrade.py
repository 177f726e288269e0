"""Rolling upgrade from the previous release, and replacing a dead node (README: Upgrading,
Replacing a dead node; docs/architecture.md §12).

The previous release (0.2.0, release 2, git commit ed38e76: the baseline this release
describes) runs from a virtualenv of its own (tests/old_release.py). One cluster per backend
(SQLite, then PostgreSQL: the metadata database is where the two releases' schemas meet), a
1-second DAG on a worker:

1. The database as 0.2.0 migrated it (revision 0004); three nodes of 0.2.0, which finalize
   their cluster at version 2 (a production cluster of 0.2.0), and a variable set. Node 2 is
   replaced by this release on its data directory; it migrates the database on start. The
   cluster version stays 2; a DAG that uses something 0.2.0 lacks (if this release has such
   a DAG-file feature) is held back (an import error saying to finish the upgrade), and
   variables do not reach the database yet (release 3's SECRET entries: a 0.2.0 node applies
   SetSecret without one). The new node is rolled back to 0.2.0 on its data directory (after
   `raftsched db migrate --to 0004`) and forward again. Then each old node in turn, followers
   first and the leader last: SIGTERM, this release on the same data directory and address,
   caught up before the next. Only once all three run it is the cluster version 3 (logged),
   the held DAG is registered, and every variable held reaches the database. No slot was
   missed or doubled and replicas agree throughout.
2. (PostgreSQL's cluster) A node dies (kill -9): `cluster status` shows it unreachable,
   `cluster remove-node` it, start a node with a new address and an empty data directory
   (ignored until added), `cluster add-node` it; it catches up and agrees. A survivor
   restarts with the config that names the new address instead of the dead one.
"""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from api_harness import ADMIN, ApiCluster
from cryptography.fernet import Fernet
from harness import (
    Node,
    check_slots,
    child_env,
    config_text,
    every_second_dag,
    second_slots,
    utcnow,
    wait_for,
    whole_second,
)
from test_rest_api import _database

import raftsched
from raftsched.api.gen import cluster_pb2, dag_pb2, secret_pb2
from raftsched.cli.main import main
from raftsched.core import versions as vs
from raftsched.store.migrate import head_revision
from tests.old_release import CACHE, OLD_VERSION, old_env, old_python, old_source_tree

pytestmark = pytest.mark.slow

DAG_ID = "every_second_0"
OLD = vs.BASELINE_RELEASE  # the previous release's protocol number (2)
OLD_HEAD = "0004"  # 0.2.0's last migration
# A DAG file that uses a feature 0.2.0 lacks: a schedule policy (a DagSpec field new in
# release 3). An old node's parse refuses the argument; a new node's is held back by the gate.
FEATURE_DAG = """\
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("uses_overlap", schedule=None, start_date=datetime(2026, 1, 1), overlap="skip") as dag:
    BashTask("only", command="true")
"""
FEATURE_DAGS = {"uses_overlap"}
VARIABLES = {"BEFORE": "clear-before-3f1a", "MIXED": "clear-mixed-77c0"}


def run_old(node: Node) -> None:
    """This node runs 0.2.0 from its own virtualenv, in a directory of its own (so that this
    checkout is not on its path)."""
    argv = Node.argv(node)
    cwd = CACHE
    launcher = (
        "import os, runpy, sys; os.chdir(sys.argv.pop(1));"
        " runpy.run_module('raftsched', run_name='__main__', alter_sys=True)"
    )
    args = argv[argv.index("--config") :]  # whichever entry point the harness starts it with
    node.argv = lambda: [*old_python(), "-c", launcher, str(cwd), *args]  # type: ignore[method-assign]
    node.env = old_env(child_env())


def run_new(node: Node) -> None:
    node.argv = lambda: Node.argv(node)  # type: ignore[method-assign]
    node.env = child_env()


def release_of(status: dict[str, Any] | None) -> int | None:
    if status is None:
        return None
    return int(status.get("release") or vs.FIRST_RELEASE)  # 0.1.0 reported none


def old_cli(cluster: ApiCluster, *args: str) -> None:
    """`raftsched --config ... ARGS` of 0.2.0."""
    code = "import runpy; runpy.run_module('raftsched', run_name='__main__', alter_sys=True)"
    done = subprocess.run(
        [*old_python(), "-c", code, "--config", str(cluster.config_path), *args],
        cwd=CACHE,
        env=old_env(child_env()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def cli(cluster: ApiCluster, *args: str, check: bool = True) -> str:
    """`raftsched ARGS` of this release against the cluster's API as an admin, run in this
    process (the same code path as the command, without a second interpreter's start-up)."""
    servers = ",".join(cluster.api_addresses)
    return _main(cluster, *args, "--server", servers, "--token", ADMIN, check=check)


def db_cli(cluster: ApiCluster, *args: str) -> str:
    """`raftsched db ARGS` of this release on the config's database, in this process."""
    return _main(cluster, "db", *args)


def _main(cluster: ApiCluster, *args: str, check: bool = True) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["--config", str(cluster.config_path), *args])
    assert code == 0 or not check, f"raftsched {' '.join(args)}: {out.getvalue()}"
    return out.getvalue() if code == 0 else ""


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiCluster]:
    old_source_tree()  # fails clearly when the history lacks the previous release
    workdir = tmp_path_factory.mktemp(f"upgrade-{request.param}")
    start = whole_second(utcnow()) - timedelta(seconds=3)
    dags = {f"{DAG_ID}.py": every_second_dag(DAG_ID, start=start)}
    if FEATURE_DAG:
        dags["feature.py"] = FEATURE_DAG
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    with (
        _database(request.param, workdir) as url,
        ApiCluster(
            workdir / "cluster", url, dags=dags, spare=1, migrate=False, config=config
        ) as harness,
    ):
        harness.start_at = start  # type: ignore[attr-defined]
        yield harness
        # Stopped together, the last node to lead would wait out a proposal it can no longer
        # commit (~5 s); nothing is checked past this point, so: workers first (while they
        # can reach a node), then kill -9.
        for worker in harness.workers.values():
            worker.stop()
        for node in [*harness.nodes, *harness.extra]:
            node.kill()


def test_rolling_upgrade_from_the_previous_release(cluster: ApiCluster) -> None:
    old_cli(cluster, "db", "migrate")  # the database as 0.2.0 left it
    assert _db_revision(cluster) == OLD_HEAD, "README, Upgrading, names 0.2.0's head revision"
    head = head_revision()
    for index in range(3):  # a cluster of 0.2.0, as users run it today
        run_old(cluster.nodes[index])
        cluster.nodes[index].start()
    cluster.recorder.start()
    cluster.wait_leader(timeout=60)
    client = cluster.client()
    cluster.wait_dags(client, {DAG_ID})
    cluster.start_worker("w", noop=True, concurrency=4)
    wait_for(
        lambda: all((s or {}).get("cluster_version") == OLD for s in cluster.statuses().values()),
        timeout=30,
        what=f"the cluster of {OLD_VERSION} at cluster version {OLD}",
        describe=cluster.brief,
    )
    _set_variable(client, "BEFORE")

    # node 2 runs this release: it reports it, migrates the database (additions only), and
    # the cluster version stays the old one
    cluster.nodes[2].stop()
    cluster.nodes[2].proc = None
    run_new(cluster.nodes[2])
    cluster.nodes[2].start()
    _caught_up(cluster, 2)
    wait_for(lambda: release_of(cluster.status(2)) == vs.RELEASE, timeout=30, what="release")
    assert [release_of(cluster.status(i)) for i in range(3)] == [OLD, OLD, vs.RELEASE]
    assert _db_revision(cluster) == head, "the new release's first node migrates on start"

    def grpc_releases() -> dict[str, int]:  # 0.2.0 nodes answer for every member too
        nodes = client.cluster.GetStatus(cluster_pb2.GetStatusRequest()).nodes
        return {n.address: n.release for n in nodes}

    wait_for(
        lambda: grpc_releases().get(cluster.addresses[2]) == vs.RELEASE,
        timeout=30,
        what="the release in GetStatus",
        describe=grpc_releases,
    )
    shown = lambda: cli(cluster, "cluster", "status", check=False)  # noqa: E731
    old_cell, new_cell = f"{OLD_VERSION}/r{OLD}", f"{raftsched.__version__}/r{vs.RELEASE}"
    wait_for(  # an election under load answers "no leader" (exit 3) for a moment
        lambda: old_cell in (text := shown()) and new_cell in text,
        timeout=30,
        what="`cluster status` showing both releases",
    )

    # the new node leads: a DAG that needs release 3 is held back, with the reason, and a
    # variable set now stays out of the database (0.2.0 nodes emit no SECRET entry)
    _lead(cluster, client, 2)
    if FEATURE_DAG:
        wait_for(
            lambda: "finish the upgrade" in _import_errors(client),
            timeout=30,
            what="the held-back DAG's import error",
            describe=lambda: _import_errors(client),
        )
    _set_variable(client, "MIXED")
    runs = len(cluster.run_dates().get(DAG_ID, []))
    wait_for(  # materialized past the variable
        lambda: len(cluster.run_dates().get(DAG_ID, [])) >= runs + 2, timeout=30, what="runs"
    )
    assert cluster.status(2)["cluster_version"] == OLD  # type: ignore[index]
    assert _stored_variables(cluster) == {}

    # rollback of the new node to 0.2.0 (before finalization), then forward again; the
    # schema goes back first, with this release's CLI (README, Upgrading: Rollback)
    cluster.nodes[2].stop()
    cluster.nodes[2].proc = None
    assert head in db_cli(cluster, "check")
    db_cli(cluster, "migrate", "--to", OLD_HEAD)
    assert _db_revision(cluster) == OLD_HEAD
    run_old(cluster.nodes[2])
    cluster.nodes[2].start()
    _caught_up(cluster, 2)
    assert release_of(cluster.status(2)) == OLD
    cluster.nodes[2].stop()
    cluster.nodes[2].proc = None
    run_new(cluster.nodes[2])
    cluster.nodes[2].start()
    _caught_up(cluster, 2)
    assert _db_revision(cluster) == head  # migrated again by the new node's start

    # rolling: one old node at a time, followers first and the leader last (README), each on
    # its own data directory and address
    old = [0, 1]
    while old:
        assert all(
            (s or {}).get("cluster_version", OLD) == OLD for s in cluster.statuses().values()
        ), f"the cluster version was raised while a node of {OLD_VERSION} was a member"
        leader = cluster.wait_leader(timeout=30)
        index = next((i for i in old if i != leader), old[0])
        old.remove(index)
        cluster.nodes[index].stop()
        cluster.nodes[index].proc = None
        run_new(cluster.nodes[index])
        cluster.nodes[index].start()
        _caught_up(cluster, index)

    def finalized() -> bool:
        statuses = [cluster.status(i) for i in range(3)]
        return all(s and s.get("cluster_version") == vs.RELEASE for s in statuses)

    wait_for(
        finalized,
        timeout=30,
        what=f"cluster version {vs.RELEASE} on every node",
        describe=cluster.brief,
    )
    finalized_at = utcnow()
    logged = f"cluster version {vs.RELEASE} committed"
    assert any(logged in node.log_path.read_text(errors="replace") for node in cluster.nodes)
    cluster.wait_dags(client, {DAG_ID, *FEATURE_DAGS}, timeout=30)  # accepted now
    # the SetClusterVersion that raised it emitted every variable held: in the DB, encrypted
    wait_for(
        lambda: set(_stored_variables(cluster)) == set(VARIABLES),
        timeout=30,
        what="every variable in the DB",
        describe=lambda: _stored_variables(cluster),
    )
    stored = repr(_stored_variables(cluster))
    assert not any(value in stored for value in VARIABLES.values())

    # every slot up to the finalization exactly once; replicas agree
    expected = second_slots(cluster.start_at, whole_second(finalized_at))  # type: ignore[attr-defined]
    wait_for(
        lambda: set(expected) <= set(cluster.run_dates().get(DAG_ID, [])),
        timeout=30,
        what="every slot in the DB",
    )
    actual = {DAG_ID: [d for d in cluster.run_dates()[DAG_ID] if d <= expected[-1]]}
    assert not check_slots(actual, {DAG_ID: expected})
    cluster.wait_caught_up(timeout=30)
    cluster.assert_replicas_agree(min_comparisons=1)


# Once, on the production backend (the procedure does not touch the metadata database), on
# the cluster the upgrade test left behind: this release on every node.
@pytest.mark.parametrize(
    "cluster", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_replace_a_dead_node(cluster: ApiCluster) -> None:
    """README, Replacing a dead node, step by step: remove it, add a node with a new address,
    and restart a survivor with the config that names it."""
    assert all(node.alive for node in cluster.nodes), "runs after the upgrade, on its cluster"
    client = cluster.client()
    leader = cluster.wait_leader()
    dead = next(i for i in range(3) if i != leader)
    cluster.kill(dead)
    gone = cluster.addresses[dead]

    # 1. `cluster status`: the dead node unreachable, the other two with a leader
    def status_row() -> str:
        text = cli(cluster, "cluster", "status", check=False)
        row = next((line for line in text.splitlines() if gone in line), "")
        return row if "unreachable" in row and "leader: 127.0.0.1" in text else ""

    wait_for(status_row, timeout=30, what=f"`cluster status` showing {gone} unreachable")
    # 2. remove it
    cli(cluster, "cluster", "remove-node", gone)
    # 3. a node under a new address, empty data directory, config naming the members left
    spare = cluster.spare_addresses[0]
    survivors = [a for a in cluster.addresses if a != gone]
    sections = copy.deepcopy(cluster.sections)
    sections["cluster"]["nodes"] = ",".join([*survivors, spare])
    config = cluster.workdir / "replacement.cfg"
    config.write_text(config_text(sections))
    node = Node(9, spare, config, cluster.log_dir / "node-9.log", child_env())
    cluster.extra.append(node)
    node.start()
    wait_for(node.status, timeout=30, what="the new node's /status")
    members = lambda: {n.address for n in _nodes(client)}  # noqa: E731
    assert spare not in members(), "a node not added yet is not a member"
    # 4. add it
    assert spare in cli(cluster, "cluster", "add-node", spare)

    def caught_up() -> bool:
        nodes = _nodes(client)
        new = [n for n in nodes if n.address == spare]
        return (
            sorted(n.address for n in nodes) == sorted([*survivors, spare])
            and bool(new)
            and new[0].role == cluster_pb2.NODE_ROLE_FOLLOWER
            and new[0].lag < 20
        )

    wait_for(caught_up, timeout=60, what="the replacement to catch up")
    runs = len(cluster.run_dates().get(DAG_ID, []))
    wait_for(lambda: len(cluster.run_dates().get(DAG_ID, [])) >= runs + 2, timeout=30, what="runs")
    nodes = client.cluster.GetStatus(cluster_pb2.GetStatusRequest()).nodes
    applied = {n.address: (n.digest_index, n.digest) for n in nodes}
    wait_for(
        lambda: len({d for _, d in _digests_at_same_index(client)}) == 1,
        timeout=30,
        what="the replacement's digest to agree",
        describe=lambda: applied,
    )

    # 5. a survivor's next restart uses the config with the new address in place of the dead
    follower = next(i for i in range(3) if i not in (dead, cluster.wait_leader(timeout=30)))
    cluster.nodes[follower].stop()
    cluster.nodes[follower].proc = None
    cluster.nodes[follower].config_path = config
    cluster.nodes[follower].start()
    wait_for(
        lambda: any(
            n.address == cluster.addresses[follower]
            and n.role == cluster_pb2.NODE_ROLE_FOLLOWER
            and n.lag < 20
            for n in _nodes(client)
        ),
        timeout=45,
        what="the restarted survivor to follow",
        describe=lambda: _nodes(client),
    )
    assert members() == {*survivors, spare}
    wait_for(
        lambda: len({d for _, d in _digests_at_same_index(client)}) == 1,
        timeout=30,
        what="every member's digest to agree after the restart",
        describe=lambda: [(n.address, n.digest_index, n.digest[:12]) for n in _nodes(client)],
    )


def _nodes(client: Any) -> list[Any]:
    return list(client.cluster.GetStatus(cluster_pb2.GetStatusRequest()).nodes)


def _digests_at_same_index(client: Any) -> list[tuple[int, str]]:
    """(index, digest) of every node, if all reported the same index (else two entries)."""
    nodes = _nodes(client)
    seen = {(n.digest_index, n.digest) for n in nodes}
    return list(seen) if len({i for i, _ in seen}) == 1 else [(0, "a"), (0, "b")]


def _lead(cluster: ApiCluster, client: Any, index: int) -> None:
    target = cluster.addresses[index]

    def moved() -> bool:
        if cluster.leader() == index:
            return True
        try:
            client.cluster.TransferLeadership(cluster_pb2.TransferLeadershipRequest(target=target))
        except Exception:
            return False
        return cluster.leader() == index

    wait_for(moved, timeout=30, what=f"node {index} to lead", interval=0.5)


def _caught_up(cluster: ApiCluster, index: int) -> None:
    def done() -> bool:
        leader = cluster.leader()
        if leader is None:
            return False
        ahead, mine = cluster.status(leader), cluster.status(index)
        return bool(ahead and mine and mine["applied_index"] >= ahead["commit_index"] - 5)

    wait_for(done, timeout=45, what=f"node {index} to catch up", describe=cluster.brief)


def _set_variable(client: Any, key: str) -> None:
    request = secret_pb2.SetSecretRequest(kind="variable", key=key, value=VARIABLES[key])
    wait_for(  # an election under load answers "no leader" for a moment
        lambda: _try(lambda: client.secrets.SetSecret(request)),
        timeout=30,
        what=f"variable {key} set",
    )


def _try(call: Any) -> bool:
    try:
        call()
    except Exception:
        return False
    return True


def _stored_variables(cluster: ApiCluster) -> dict[str, str]:
    """key -> ciphertext of the metadata database's variables ({} before the table exists)."""
    import sqlalchemy as sa

    from raftsched.store import tables as t

    if not sa.inspect(cluster.engine).has_table("secret"):
        return {}
    query = sa.select(t.secret.c.key, t.secret.c.ciphertext).where(t.secret.c.kind == "variable")
    with cluster.engine.connect() as conn:
        return {str(k): str(v) for k, v in conn.execute(query).all()}


def _import_errors(client: Any) -> str:
    answer = client.dags.ListImportErrors(dag_pb2.ListImportErrorsRequest())
    return " | ".join(e.message for e in answer.import_errors)


def _db_revision(cluster: ApiCluster) -> str:
    import sqlalchemy as sa

    with cluster.engine.connect() as conn:
        return str(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar())
