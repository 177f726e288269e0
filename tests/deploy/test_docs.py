"""The documents are right.

docs/architecture.md is the repository's design document: code cites its sections, and every
citation points at a section that exists. The design notes outside the repository
(../shared/DESIGN.md) are not cited any more: a newcomer's checkout does not have them.

The README's shell blocks run: every command in them either runs here, in README order,
against a one-node cluster on loopback standing in for the standalone one
(``$RAFTSCHED_HOME=.raftsched-home``, the example DAGs, a Fernet key), and exits 0, or is
listed in :data:`NOT_RUN` with the reason (remote hosts, Docker, root, long-running
processes, benchmarks). A new command lands in one or the other, or this test fails. Its
Python blocks each parse as a DAG file, and its list of admin commands is the command's. The
migration guide's commands (docs/migrating-from-airflow.md) run too, on Airflow's tutorial DAG.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
CITED_FROM = ("raftsched", "web", "scripts", "tests")


def sources() -> list[Path]:
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    for folder in CITED_FROM:
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file()
            and p.suffix in ("", ".py", ".sh", ".md", ".toml", ".cfg")
            and "__pycache__" not in p.parts
        ]
    return files


def sections() -> set[str]:
    return set(re.findall(r"^## (\d+[a-z]?)\. ", DOC.read_text(encoding="utf-8"), re.M))


def test_the_document_has_its_numbered_sections() -> None:
    found = sections()
    assert {"1", "2", "3", "4", "5", "5b", "6", "7", "8", "9", "10"} <= found, found


def test_every_citation_names_an_existing_section() -> None:
    known = sections()
    bad = []
    for path in sources():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number in re.findall(r"docs/architecture\.md §(\d+[a-z]?)", text):
            if number not in known:
                bad.append(f"{path.relative_to(ROOT)}: §{number}")
    assert not bad, bad


def test_nothing_cites_the_old_design_notes() -> None:
    """raftsched/core is left to its owners (it cites none today)."""
    stale = []
    for path in sources():
        if path == Path(__file__) or path.is_relative_to(ROOT / "raftsched" / "core"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if re.search(r"\bDESIGN(\.md)? (§|section)", text):
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, stale


# -- the README's shell blocks -----------------------------------------------------------------

README = ROOT / "README.md"
SHELL_FENCES = ("", "bash", "sh", "shell", "console")

# (section, a regex the command starts with) -> why it does not run here. Every other command
# of a shell block runs.
NOT_RUN: dict[tuple[str, str], str] = {
    ("Set-up: two commands", r"\./scripts/run"): "starts the standalone cluster until Ctrl-C "
    "(tests/integration/test_standalone.py runs it)",
    ("Set-up: two commands", r"\./scripts/test"): "the whole suite, this test included",
    (
        "Installing without the scripts",
        r"python3 -m venv|python3 -m pip install build|pip install 'dist/",
    ): "tests/deploy/test_wheel.py builds the wheel "
    "and installs it into a fresh venv (this checkout's install is scripts/bootstrap.sh's)",
    ("Installing without the scripts", r"pip install 'raftsched\[web\] @ git\+"): "a remote "
    "git host",
    ("Running a cluster by hand", r"raftsched --config raftsched\.cfg"): "the machines "
    "10.0.0.1-3 of the example (tests/unit/test_config_keys.py parses these lines)",
    ("Writing DAGs", r"raftsched dags test etl"): "the example's load task runs ./load.sh, the "
    "reader's own script (tests/unit/test_cli_dags_test.py runs dags test)",
    ("Workers", r""): "a synopsis, with options in brackets",
    ("Queues", r"raftsched worker"): "a worker runs until stopped "
    "(tests/integration/test_queues_e2e.py)",
    ("Audit log", r"raftsched audit \["): "a synopsis, with options in brackets",
    ("Web UI", r"raftsched --config raftsched\.cfg webserver"): "a synopsis, with options in "
    "brackets",
    ("Web UI", r"\.venv/bin/python scripts/run_webservers\.py"): "webservers and nginx until "
    "Ctrl-C (tests/integration/test_web_lb.py)",
    ("REST API", r""): "webservers that run until stopped (tests/integration/test_rest_api.py "
    "drives every route)",
    ("Deploying with Docker Compose", r""): "needs a Docker engine (tests/deploy/test_compose.py "
    "parses these commands)",
    ("Partition testing", r"sudo "): "root and minutes (CI's partition test runs the short one)",
    ("Partition testing", r"\.venv/bin/python -m scripts\.sim\.run"): "seconds to hours of "
    "simulation (tests/unit/test_sim_seeds.py runs the CI seeds)",
    ("Rebuilding a cluster from the database", r"raftsched"): "rewrites every node's Raft files "
    "(tests/integration/test_cluster_rebuild.py)",
    ("Metrics and logs", r"curl -s http://127\.0\.0\.1:7401/"): "a running worker's metrics "
    "(tests/integration/test_queues_e2e.py scrapes a real worker's while it runs a task)",
    ("Layout", r""): "not commands: the tree of the repository",
    ("Benchmarks", r""): "minutes each, on purpose outside CI",
}


def readme_shell_commands(text: str) -> list[tuple[str, str]]:
    """(section, command) for each command of the README's indented blocks and bash/sh
    fences: backslash continuations joined, comment lines dropped."""
    found: list[tuple[str, str]] = []
    section, fence, block = "", None, []
    prev_blank, indented = True, False

    def flush() -> None:
        for line in "\n".join(block).replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                found.append((section, line.strip()))
        block.clear()

    for raw in text.splitlines():
        if fence is not None:
            if raw.startswith("```"):
                if fence in SHELL_FENCES:
                    flush()
                block.clear()
                fence = None
            else:
                block.append(raw)
            continue
        if raw.startswith("```"):
            fence, indented = raw[3:].strip(), False
        elif raw.startswith("    ") and (prev_blank or indented):
            indented = True
            block.append(raw[4:])
        elif indented and not raw.strip():
            block.append("")
        else:
            if indented:
                flush()
            indented = False
            if raw.startswith("#"):
                section = raw.lstrip("#").strip()
        prev_blank = not raw.strip()
    if indented:
        flush()
    return found


def why_not_run(section: str, command: str) -> str | None:
    for (where, pattern), reason in NOT_RUN.items():
        if where == section and re.match(pattern, command):
            return reason
    return None


def test_the_extraction_finds_the_blocks_it_must() -> None:
    commands = readme_shell_commands(README.read_text(encoding="utf-8"))
    sections = {section for section, _ in commands}
    assert {"Set-up: two commands", "The standalone cluster", "Variables and connections"} <= (
        sections
    )
    assert ("Metrics and logs", "curl -s http://127.0.0.1:7201/metrics | grep '^raftsched_'") in (
        commands
    )


def test_every_reason_not_to_run_still_matches_a_command() -> None:
    commands = readme_shell_commands(README.read_text(encoding="utf-8"))
    stale = [
        key for key in NOT_RUN if not any(s == key[0] and re.match(key[1], c) for s, c in commands)
    ]
    assert not stale, f"NOT_RUN entries that match no README command any more: {stale}"


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_each_python_block_parses_as_a_dag_file(index: int, tmp_path: Path) -> None:
    from raftsched.dags.parser import parse_folder

    (tmp_path / f"block_{index}.py").write_text(readme_python_blocks()[index])
    result = parse_folder(tmp_path, timeout=30, output_limit=1 << 20, catchup_by_default=False)
    assert not result.errors, [e.message for e in result.errors]
    assert result.specs, "the block defines no DAG"


def test_the_admin_command_list_is_the_commands() -> None:
    """README "Admin CLI" names every subcommand raftsched has (but the processes, which have
    sections of their own), and nothing else."""
    from raftsched.cli.main import build_parser

    def leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    below = leaves(child, (*prefix, name))
                    found |= below or {(*prefix, name)}
        return found

    processes = {("scheduler",), ("worker",), ("webserver",), ("standalone",), ("triggerer",)}
    actual = {" ".join(words) for words in leaves(build_parser(), ()) - processes}
    text = README.read_text(encoding="utf-8")
    start = text.index("## Admin CLI\n")
    listing = text[start : text.index("Options:", start)]
    listed: set[str] = set()
    for group, rest in re.findall(r"`(?:raftsched )?(\w+) ([^`]+)`", listing):
        for item in rest.split("|"):
            words = re.sub(r"\s*(\[[^\]]*\]|--[\w-]+)", "", item).split()
            if words or item.lstrip().startswith("["):  # `audit [--since ...]`: no subcommand
                listed.add(" ".join([group, *words]))
    assert listed == actual, {"missing": actual - listed, "not a command": listed - actual}


@pytest.fixture
def readme_workdir(tmp_path: Path, sqlite_url: str):  # type: ignore[no-untyped-def]
    """A directory where the README's commands run: a one-node cluster whose config is
    ``.raftsched-home/raftsched.cfg`` (the example DAGs and the README's ``etl``), and the
    README's ``etl`` in ``path/to/dags``."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from cryptography.fernet import Fernet
    from harness import ClusterHarness

    from raftsched.addresses import api_address_for
    from raftsched.api.client import RaftschedClient
    from raftsched.api.gen import dag_pb2

    sys.path.remove(str(ROOT / "tests" / "integration"))
    work = tmp_path / "work"
    etl = readme_python_blocks()[0]
    (work / "path" / "to" / "dags").mkdir(parents=True)
    (work / "path" / "to" / "dags" / "etl.py").write_text(etl)
    examples = ROOT / "raftsched" / "example_dags"
    dags = {p.name: p.read_text() for p in examples.glob("*.py") if p.name != "__init__.py"}
    dags["etl.py"] = etl
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    with ClusterHarness(
        work / ".raftsched-home", sqlite_url, nodes=1, dags=dags, config=config
    ) as cluster:
        cluster.start()
        for _ in range(300):  # its own election (wait_leader wants a follower to agree)
            if (cluster.status(0) or {}).get("role") == "leader":
                break
            time.sleep(0.2)
        client = RaftschedClient([api_address_for(cluster.addresses[0])], deadline=15.0)
        try:
            wanted = {"etl", "example_manual", "example_taskflow"}
            for _ in range(300):  # up to a minute: the leader's first parse
                listed = client.dags.ListDags(dag_pb2.ListDagsRequest()).dags
                if wanted <= {d.dag_id for d in listed}:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"DAGs {sorted(wanted)} never registered")
        finally:
            client.close()
        yield work, cluster


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_readme_command_that_can_run_here_runs(readme_workdir) -> None:  # type: ignore[no-untyped-def]
    work, cluster = readme_workdir
    admin_port = cluster.nodes[0].port + 100
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAFTSCHED") and k not in ("PYTHONPATH",)
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        RAFTSCHED_HOME=str(work / ".raftsched-home"),
        RAFTSCHED_SEEN_INDEX_FILE="",
    )
    shutil.copytree(
        ROOT / "scripts", work / "scripts", ignore=shutil.ignore_patterns("__pycache__")
    )
    ran: list[str] = []
    for section, command in readme_shell_commands(README.read_text(encoding="utf-8")):
        if why_not_run(section, command):
            continue
        # The standalone cluster's admin port is this cluster's.
        line = command.replace("127.0.0.1:7201", f"127.0.0.1:{admin_port}")
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"README [{section}]: {command}\nexit {done.returncode}\n{done.stdout[-2000:]}"
            f"{done.stderr[-2000:]}"
        )
        ran.append(command)
    assert len(ran) >= 15, ran


# -- the migration guide's shell block ---------------------------------------------------------

MIGRATING = ROOT / "docs" / "migrating-from-airflow.md"


@pytest.mark.timeout(300)
def test_the_migration_guides_commands_run(tmp_path: Path) -> None:
    """Its "Check a file before deploying it" commands, on Airflow's tutorial DAG
    (tests/fixtures/airflow_dags/tutorial.py, writing to this test's folder) in ``dags/``, with
    no config and no cluster: each only reads the folder."""
    commands = readme_shell_commands(MIGRATING.read_text(encoding="utf-8"))
    assert [c.split()[:3] for _, c in commands] == [
        ["raftsched", "dags", "parse"],
        ["raftsched", "dags", "next"],
        ["raftsched", "dags", "test"],
        ["raftsched", "tasks", "test"],
    ], commands
    (tmp_path / "dags").mkdir()
    (tmp_path / "out").mkdir()
    tutorial = (ROOT / "tests" / "fixtures" / "airflow_dags" / "tutorial.py").read_text()
    assert '"/nonexistent"' in tutorial
    tutorial = tutorial.replace('"/nonexistent"', json.dumps(str(tmp_path / "out")))
    (tmp_path / "dags" / "tutorial.py").write_text(tutorial)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAFTSCHED") and k not in ("PYTHONPATH",)
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for _, command in commands:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"{MIGRATING.name}: {command}\nexit {done.returncode}\n{done.stdout[-2000:]}"
            f"{done.stderr[-2000:]}"
        )
    assert "print_date" in (tmp_path / "out" / "order").read_text()
