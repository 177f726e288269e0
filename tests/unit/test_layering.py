"""The architecture's import rules (docs/architecture.md §2), read from the source itself.

- raftsched/core imports only the standard library, croniter, raftsched.errors and itself: the
  replicated state machine stays pure (no network, DB, thread or clock module).
- raftsched/cluster (Raft and the leader loop) imports nothing from the layers above it: api,
  web, cli, worker, standalone.
- Only raftsched/raft imports pysyncobj (product code and scripts), and raftsched/raft imports
  nothing of the scheduler built on it: cluster, store, api, web, cli, worker, standalone.
- No import cycle inside raftsched/core (module-level imports).
- No product module over 400 lines outside generated code. The modules listed in OVERSIZE are
  known to be over, each at most its listed length: split one, then drop it from the list.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

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
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    nodes = tree.body if module_level_only else list(ast.walk(tree))
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


def test_core_imports_only_the_standard_library_croniter_and_errors() -> None:
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for name, path in modules():
        if not _is_under(name, ("raftsched.core",)):
            continue
        for module in imports(name, path):
            top = module.split(".")[0]
            if top == "__future__" or top in stdlib:
                continue
            if _is_under(module, ("raftsched.core",)) or _is_under(module, CORE_MAY_IMPORT):
                continue
            if module.startswith("raftsched.errors."):
                continue
            bad.append(f"{name} imports {module}")
    assert not bad, "the core must stay pure:\n" + "\n".join(sorted(set(bad)))


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
