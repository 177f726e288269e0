"""The architecture's import rules (docs/architecture.md §2), read from the source itself.

- raftsched/core imports only CORE_STDLIB (an allowlist of pure standard-library modules),
  croniter, raftsched.errors and itself: the replicated state machine stays pure (no network,
  DB, thread, clock, randomness or process module: threading, socket, time, random, os...).
- raftsched/cluster (Raft and the leader loop) imports nothing from the layers above it: api,
  web, cli, worker, standalone.
- Only raftsched/raft imports pysyncobj (product code and scripts), and raftsched/raft imports
  nothing of the scheduler built on it: cluster, store, api, web, cli, worker, standalone.
- No import cycle inside raftsched/core (module-level imports, those under ``if TYPE_CHECKING:``
  included: a type-only cycle is still two modules that cannot be understood apart).
- No product module over 400 lines outside generated code. The modules listed in OVERSIZE are
  known to be over, each at most its listed length: split one, then drop it from the list.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"raftsched": ROOT / "raftsched", "raftsched.web": ROOT / "web"}
GENERATED = ("raftsched.api.gen",)
MAX_LINES = 400
# module -> its length today: it may shrink, never grow (a ratchet until it is split)
OVERSIZE: dict[str, int] = {
    # This release's policies, triggers, mapping and audit each added fields here; the
    # commands and the limits want a split by concept (e.g. trigger commands, spec limits)
    "raftsched.core.commands": 409,
    "raftsched.core.limits": 409,
    "raftsched.core.model": 406,
    # One concept, not a split candidate: the error vocabulary (every typed error the product
    # raises on purpose lives here, so a caller finds them all in one place)
    "raftsched.errors": 423,
}
CORE_MAY_IMPORT = {"croniter", "raftsched.errors"}
# The standard-library modules the core may import: each is pure (a function of its inputs; no
# I/O, thread, clock or randomness), so every replica computes the same thing. Not stdlib at
# large: threading, socket, time, random, os, subprocess, uuid (uuid4)... would make apply
# depend on the machine or the moment.
CORE_STDLIB = frozenset(
    {
        "__future__",
        "abc",
        "base64",
        "bisect",
        "collections",
        "copy",
        "dataclasses",
        "datetime",  # date arithmetic only: the core never asks for now() (commands carry it)
        "difflib",  # "did you mean" suggestions in refusals
        "enum",
        "functools",
        "gc",  # snapshot restore pauses the collector: speed only, the result is the same
        "hashlib",
        "heapq",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "re",
        "string",
        "struct",
        "types",
        "typing",
        "zoneinfo",  # reads the IANA database: the same tzdata on every node (a pinned package)
    }
)
# Type-only imports (``if TYPE_CHECKING:``) that close a cycle in core, as of today: the
# handlers and helpers annotate their argument as the whole ``SchedulerState`` (and ``changes``
# names ``transitions``' types). The cycle check ignores exactly these edges; they go as the
# handlers are given the owners they change (catalog, run table, queue, outbox) instead of the
# whole state. Never add one: a new type-only cycle fails the check like any other.
TYPE_ONLY_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        ("raftsched.core.audit", "raftsched.core.state"),
        ("raftsched.core.callbacks", "raftsched.core.state"),
        ("raftsched.core.changes", "raftsched.core.state"),
        ("raftsched.core.command_table", "raftsched.core.state"),
        ("raftsched.core.dagrun_trigger", "raftsched.core.state"),
        ("raftsched.core.handlers_assets", "raftsched.core.state"),
        ("raftsched.core.handlers_callbacks", "raftsched.core.state"),
        ("raftsched.core.handlers_dags", "raftsched.core.state"),
        ("raftsched.core.handlers_marks", "raftsched.core.state"),
        ("raftsched.core.handlers_pools", "raftsched.core.state"),
        ("raftsched.core.handlers_runs", "raftsched.core.state"),
        ("raftsched.core.handlers_secrets", "raftsched.core.state"),
        ("raftsched.core.handlers_tasks", "raftsched.core.state"),
        ("raftsched.core.handlers_triggers", "raftsched.core.state"),
        ("raftsched.core.persisted", "raftsched.core.state"),
        ("raftsched.core.run_ending", "raftsched.core.state"),
        ("raftsched.core.run_timeout", "raftsched.core.state"),
        ("raftsched.core.secret_reads", "raftsched.core.state"),
        ("raftsched.core.transitions", "raftsched.core.state"),
        ("raftsched.core.xcom", "raftsched.core.state"),
        ("raftsched.core.changes", "raftsched.core.transitions"),
    }
)
ABOVE_CLUSTER = ("raftsched.api", "raftsched.web", "raftsched.cli", "raftsched.worker")
ABOVE_CLUSTER += ("raftsched.standalone", "raftsched.triggerer")


def modules() -> Iterator[tuple[str, Path]]:
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "raftsched" and parts[:1] == ["web"]:
                continue  # not a package of raftsched/ (the webserver is web/)
            yield name, path


def imports(name: str, path: Path, *, module_level_only: bool = False) -> set[str]:
    return imports_in(
        name,
        path.read_text(),
        is_package=path.name == "__init__.py",
        module_level_only=module_level_only,
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(
    name: str, source: str, *, is_package: bool = False, module_level_only: bool = False
) -> set[str]:
    """What module ``name`` imports: all of it, or (``module_level_only``) what it imports at
    module level, ``if TYPE_CHECKING:`` blocks included (type-only edges count)."""
    tree = ast.parse(source)
    found: set[str] = set()
    if module_level_only:
        nodes = list(tree.body)
        for node in tree.body:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                nodes.extend(node.body)
    else:
        nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _is_under(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def core_violations(name: str, found: set[str]) -> list[str]:
    """The imports of core module ``name`` that the core may not make."""
    bad = []
    for module in found:
        if module.split(".")[0] in CORE_STDLIB:
            continue
        if _is_under(module, ("raftsched.core",)) or _is_under(module, CORE_MAY_IMPORT):
            continue
        bad.append(f"{name} imports {module}")
    return bad


def test_core_imports_only_pure_stdlib_croniter_and_errors() -> None:
    bad = [
        violation
        for name, path in modules()
        if _is_under(name, ("raftsched.core",))
        for violation in core_violations(name, imports(name, path))
    ]
    assert not bad, "the core must stay pure:\n" + "\n".join(sorted(set(bad)))


@pytest.mark.parametrize(
    "source",
    [
        "import threading",
        "import socket",
        "from time import monotonic",
        "import random",
        "import os.path",
        "import subprocess",
        "from uuid import uuid4",
        "def f():\n    import time\n    return time.time()",
        "import sqlalchemy",
        "from raftsched.cluster import node",
    ],
)
def test_the_core_check_refuses_impure_modules(source: str) -> None:
    # Standard library or not: what the rule above must catch (`import threading` once passed)
    assert core_violations("raftsched.core.x", imports_in("raftsched.core.x", source))


def test_the_core_allowlist_is_pure_stdlib() -> None:
    assert set(sys.stdlib_module_names) | {"__future__"} >= CORE_STDLIB
    assert not CORE_STDLIB & {"threading", "socket", "time", "random", "os", "subprocess"}
    ok = "import json\nfrom collections.abc import Mapping\nfrom raftsched.errors import X"
    assert not core_violations("raftsched.core.x", imports_in("raftsched.core.x", ok))


def test_type_only_imports_count_as_edges_of_the_cycle_check() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from raftsched.core import b\n"
    )
    assert "raftsched.core.b" in imports_in("raftsched.core.a", source, module_level_only=True)


def test_cluster_imports_nothing_from_the_layers_above_it() -> None:
    bad = [
        f"{name} imports {module}"
        for name, path in modules()
        if _is_under(name, ("raftsched.cluster",))
        for module in imports(name, path)
        if _is_under(module, ABOVE_CLUSTER)
    ]
    assert not bad, "cluster/ is Raft and the leader loop only:\n" + "\n".join(sorted(set(bad)))


def test_only_the_raft_package_imports_pysyncobj() -> None:
    scripts = {
        f"scripts.{'.'.join(path.relative_to(ROOT / 'scripts').with_suffix('').parts)}": path
        for path in sorted((ROOT / "scripts").rglob("*.py"))
    }
    bad = [
        f"{name} imports {module}"
        for name, path in [*modules(), *scripts.items()]
        if not _is_under(name, ("raftsched.raft",))
        for module in imports(name, path)
        if _is_under(module, ("pysyncobj",))
    ]
    assert not bad, "pysyncobj belongs to raftsched/raft only:\n" + "\n".join(sorted(set(bad)))


def test_raft_imports_nothing_of_the_scheduler_built_on_it() -> None:
    above = ("raftsched.cluster", "raftsched.store", *ABOVE_CLUSTER)
    bad = [
        f"{name} imports {module}"
        for name, path in modules()
        if _is_under(name, ("raftsched.raft",))
        for module in imports(name, path)
        if _is_under(module, above)
    ]
    assert not bad, "raft/ is the Raft engine only:\n" + "\n".join(sorted(set(bad)))


def test_no_import_cycle_inside_core() -> None:
    graph: dict[str, set[str]] = {}
    for name, path in modules():
        if _is_under(name, ("raftsched.core",)):
            graph[name] = {
                m
                for m in imports(name, path, module_level_only=True)
                if m in graph or _is_under(m, ("raftsched.core",))
            }
    graph = {n: {m for m in deps if m in graph and m != n} for n, deps in graph.items()}
    graph = {
        n: {m for m in deps if (n, m) not in TYPE_ONLY_CYCLE_EDGES} for n, deps in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle in core: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_every_known_type_only_cycle_edge_is_still_type_only() -> None:
    # The ratchet only shrinks: an edge whose import is gone (or became a runtime import, which
    # the cycle check then sees) leaves the list.
    paths = dict(modules())
    stale = []
    for module, dep in sorted(TYPE_ONLY_CYCLE_EDGES):
        source = paths[module].read_text()
        everything = imports_in(module, source, module_level_only=True)
        tree = ast.parse(source)
        runtime = imports_in(
            module,
            ast.unparse(
                ast.Module(
                    body=[
                        n
                        for n in tree.body
                        if not (isinstance(n, ast.If) and _is_type_checking(n.test))
                    ],
                    type_ignores=[],
                )
            ),
        )
        if dep not in everything or dep in runtime:
            stale.append(f"{module} -> {dep}")
    assert not stale, "drop from TYPE_ONLY_CYCLE_EDGES:\n" + "\n".join(stale)


def test_no_product_module_over_400_lines() -> None:
    over = {}
    for name, path in modules():
        if _is_under(name, GENERATED):
            continue
        lines = len(path.read_text().splitlines())
        limit = OVERSIZE.get(name, MAX_LINES)
        if lines > limit:
            over[name] = lines
    assert not over, (
        f"modules over {MAX_LINES} lines (one concept per module; split them): "
        + ", ".join(f"{n} ({k})" for n, k in sorted(over.items()))
    )
