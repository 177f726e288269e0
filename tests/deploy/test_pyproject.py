"""pyproject.toml: what each process needs is declared, pinned where the code depends on
internals, split so a worker does not install the web stack, and it builds without a warning.
"""

from __future__ import annotations

import ast
import logging
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from raftsched.cluster import compat
from raftsched.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def name_of(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def names(requirements: list[str]) -> set[str]:
    return {name_of(r) for r in requirements}


def requirement(requirements: list[str], name: str) -> str:
    found = [r for r in requirements if name_of(r) == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0].split(";")[0].strip()


CORE = PROJECT["dependencies"]
EXTRAS = PROJECT["optional-dependencies"]


def test_pysyncobj_is_pinned_exactly() -> None:
    """raftsched patches its internals (raftsched/cluster/compat.py lists them)."""
    assert requirement(CORE, "pysyncobj") == f"pysyncobj=={compat.PINNED}"


def test_grpcio_tools_is_the_version_that_generated_the_code() -> None:
    generated = {
        m.group(1)
        for path in (ROOT / "raftsched" / "api" / "gen").glob("*_pb2_grpc.py")
        if (m := re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", path.read_text(), re.M))
    }
    assert len(generated) == 1, generated
    version = generated.pop()
    assert requirement(EXTRAS["dev"], "grpcio-tools") == f"grpcio-tools=={version}"
    assert requirement(CORE, "grpcio") == f"grpcio>={version}"


def _imports(folder: Path) -> dict[str, set[str]]:
    """Third-party top-level modules imported anywhere under ``folder`` -> the files."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top != "raftsched":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distributions(module: str) -> set[str]:
    dists = packages_distributions().get(module)
    assert dists, f"{module} is imported but not installed"
    return {d.lower().replace("_", "-") for d in dists}


# Imported by raftsched/ but needed only by one extra's processes, always inside a function
# (so a process without the extra never imports it).
LAZY_EXTRA_IMPORTS = {"psycopg": "postgres", "jsonschema": "airflow", "pendulum": "airflow"}


def test_every_import_is_declared() -> None:
    core = names(CORE)
    for module, files in _imports(ROOT / "raftsched").items():
        dists = _distributions(module)
        extra = LAZY_EXTRA_IMPORTS.get(module)
        declared = core | (names(EXTRAS[extra]) if extra else set())
        assert dists & declared, f"{module} ({sorted(files)}) needs one of {dists} declared"
    web = core | names(EXTRAS["web"])
    for module, files in _imports(ROOT / "web").items():
        dists = _distributions(module)
        assert dists & web, f"{module} ({sorted(files)}): declare {dists} in [web]"


def test_the_extras_split_the_web_stack_and_the_database_driver_off() -> None:
    assert {"flask", "flask-wtf", "wtforms", "gunicorn"} <= names(EXTRAS["web"])
    assert not {"flask", "flask-wtf", "wtforms", "gunicorn", "psycopg"} & names(CORE)
    assert names(EXTRAS["postgres"]) == {"psycopg"}


def test_dev_installs_everything_the_tests_need() -> None:
    """scripts/bootstrap.sh installs .[dev] for the test suite: both extras and the tools."""
    dev = EXTRAS["dev"]
    assert "raftsched[web,postgres]" in dev or "raftsched[postgres,web]" in dev
    assert {"pytest", "pytest-timeout", "hypothesis", "ruff", "pyyaml", "playwright"} <= names(dev)


@pytest.mark.parametrize(
    "modules",
    [
        # a worker
        "raftsched.cli.worker_cmd, raftsched.worker.loop, raftsched.worker.grpc_transport,"
        " raftsched.worker.runner, raftsched.api.client",
        # a scheduler node on SQLite, and the admin CLI
        "raftsched.cli.cluster_cmd, raftsched.cluster.runtime, raftsched.api.node_api,"
        " raftsched.store.materializer, raftsched.cli.dags_cmd, raftsched.cli.connect",
    ],
)
def test_no_core_process_imports_the_web_stack_or_the_database_driver(modules: str) -> None:
    """Flask and psycopg are extras: a worker, a node on SQLite or the CLI must run without."""
    code = (
        "import sys\n"
        "from raftsched.cli.main import build_parser\n"
        "build_parser()\n"
        f"import {modules}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in"
        " {'flask', 'flask_wtf', 'wtforms', 'gunicorn', 'psycopg'} or m == 'raftsched.web')\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported: {done.stdout.strip()}"


def test_the_license_file_matches_pyproject() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_build_prints_no_warning(tmp_path: Path) -> None:
    """What `pip install -e .` builds, built in a copy (the source tree stays clean): a
    setuptools warning would greet every newcomer's ./scripts/run."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("raftsched", "web"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "dist"), "."],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=src,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    warnings = [line for line in output.splitlines() if re.search(r"warn|deprecat", line, re.I)]
    assert not warnings, "\n".join(warnings)


# -- the start-up self-check of pysyncobj's internals ---------------------------------------


def test_the_installed_pysyncobj_has_what_raftsched_patches() -> None:
    assert compat.missing_internals() == []
    compat.check_pysyncobj()


def test_a_missing_internal_stops_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from pysyncobj.transport import Transport

    monkeypatch.delattr(Transport, "_onMessageReceived")  # TCPTransport inherits it
    with pytest.raises(ConfigError, match=r"TCPTransport\._onMessageReceived.*pysyncobj==0\.3\.17"):
        compat.check_pysyncobj()


def test_another_version_with_the_same_internals_only_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compat, "installed_version", lambda: "0.3.18")
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        compat.check_pysyncobj()
    assert "0.3.18" in caplog.text
