"""Start-up self-check: the pysyncobj internals raftsched patches are still there.

raftsched builds on private parts of pysyncobj 0.3.17 (pyproject.toml pins it exactly):
``raftsched.raft.transport`` subclasses its TCP transport (``ContactTransport``: leader
contact, :func:`~raftsched.raft.transport.safe_commit_index`, held acknowledgements), overrides
``SyncObj._applyCommand`` and ``_onTick``, reads name-mangled ``SyncObj`` attributes and
replaces the module-level ``createJournal``; ``raftsched.raft.journal`` implements its
``Journal`` interface and reads its ``FileJournal`` and pickle format. Another release could
rename any of these, and the node would then misbehave quietly (a patch that no longer
applies) rather than fail.

:func:`check_pysyncobj` looks for each of them without starting anything and raises
:class:`~raftsched.errors.ConfigError` naming what is missing and the version to install. A
different version whose internals all match only logs a warning. The scheduler command calls
it before it builds a node (docs/architecture.md §3).
"""

from __future__ import annotations

import logging
from importlib import metadata
from types import CodeType
from typing import Any

from raftsched.errors import ConfigError

log = logging.getLogger(__name__)

PINNED = "0.3.17"

# (module, attribute path) that must exist.
_ATTRIBUTES = (
    ("pysyncobj", "FAIL_REASON.REQUEST_DENIED"),
    ("pysyncobj.syncobj", "createJournal"),
    ("pysyncobj.syncobj", "SyncObj._applyCommand"),
    ("pysyncobj.syncobj", "SyncObj._onTick"),
    ("pysyncobj.syncobj", "SyncObj._SyncObj__callErrCallback"),
    ("pysyncobj.syncobj", "SyncObj._SyncObj__onMessageReceived"),
    ("pysyncobj.syncobj", "SyncObj.raftCommitIndex"),
    ("pysyncobj.syncobj", "SyncObj.raftLastApplied"),
    ("pysyncobj.syncobj", "SyncObj.transferLeadership"),
    ("pysyncobj.syncobj", "SyncObj.getStatus"),
    ("pysyncobj.transport", "TCPTransport.send"),
    ("pysyncobj.transport", "TCPTransport._onMessageReceived"),
    ("pysyncobj.journal", "FileJournal"),
    ("pysyncobj.pickle", "dumps"),
    ("pysyncobj.pickle", "loads"),
    ("pysyncobj.node", "TCPNode"),
    # group_commit.py and journal_sync.py (fsync off the tick thread, keep-alives, wake-ups)
    ("pysyncobj.monotonic", "monotonic"),
    # clock.py (a simulation's virtual time) and memory_transport.py (messages as data)
    ("pysyncobj.syncobj", "monotonicTime"),
    ("pysyncobj.syncobj", "random"),
    ("pysyncobj.transport", "Transport._onNodeConnected"),
    ("pysyncobj.pipe_notifier", "PipeNotifier"),
    ("pysyncobj.tcp_connection", "CONNECTION_STATE"),
    *(
        ("pysyncobj.journal", f"Journal.{name}")
        for name in (
            "add",
            "clear",
            "deleteEntriesFrom",
            "deleteEntriesTo",
            "__getitem__",
            "__len__",
            "_destroy",
            "setRaftCommitIndex",
            "getRaftCommitIndex",
            "setCurrentTerm",
            "getCurrentTerm",
            "getVotedForNodeId",
            "onOneSecondTimer",
        )
    ),
)

# Private instance attributes set in a constructor: (module, function, names it must assign).
_ASSIGNED = (
    (
        "pysyncobj.syncobj",
        "SyncObj.__init__",
        (
            "_SyncObj__raftLog",
            "_SyncObj__raftState",
            "_SyncObj__thread",
            "_SyncObj__transport",
            "_SyncObj__raftCommitIndex",
            "_SyncObj__raftMatchIndex",
            "_SyncObj__otherNodes",
            "_SyncObj__raftElectionDeadline",
            "_poller",
        ),
    ),
    ("pysyncobj.transport", "TCPTransport.__init__", ("_syncObj", "_connections")),
)

# Message fields the transport patch reads and rewrites: (module, function, string constants).
_CONSTANTS = (
    (
        "pysyncobj.syncobj",
        "SyncObj._SyncObj__onMessageReceived",
        ("append_entries", "commit_index", "next_node_idx", "type"),
    ),
)


def installed_version() -> str | None:
    try:
        return metadata.version("pysyncobj")
    except metadata.PackageNotFoundError:
        return None


def missing_internals() -> list[str]:
    """What raftsched needs of pysyncobj and cannot find (empty: all there)."""
    import importlib

    missing: list[str] = []
    for module_name, path in _ATTRIBUTES:
        if _resolve(importlib, module_name, path) is None:
            missing.append(f"{module_name}.{path}")
    for module_name, path, names in _ASSIGNED:
        code = _code(_resolve(importlib, module_name, path))
        have = set(code.co_names) if code is not None else set()
        missing += [f"{module_name}.{path} sets {n}" for n in names if n not in have]
    for module_name, path, strings in _CONSTANTS:
        code = _code(_resolve(importlib, module_name, path))
        have = _strings(code) if code is not None else set()
        missing += [f"{module_name}.{path} reads {s!r}" for s in strings if s not in have]
    return missing


def check_pysyncobj() -> None:
    """Raise ConfigError when a patched pysyncobj internal is missing; warn on another version."""
    version = installed_version()
    if version is None:
        raise ConfigError(f"pysyncobj is not installed: pip install pysyncobj=={PINNED}")
    missing = missing_internals()
    if missing:
        raise ConfigError(
            f"pysyncobj {version} lacks what raftsched patches ({', '.join(missing)});"
            f" raftsched is built for pysyncobj {PINNED}: pip install pysyncobj=={PINNED}"
        )
    if version != PINNED:
        log.warning(
            "pysyncobj %s is installed; raftsched is tested with %s only (its patched"
            " internals are present, but behaviour may differ)",
            version,
            PINNED,
        )


def _resolve(importlib: Any, module_name: str, path: str) -> Any:
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _code(obj: Any) -> CodeType | None:
    return getattr(obj, "__code__", None)


def _strings(code: CodeType) -> set[str]:
    found: set[str] = set()
    todo = [code]
    while todo:
        current = todo.pop()
        for const in current.co_consts:
            if isinstance(const, str):
                found.add(const)
            elif isinstance(const, CodeType):
                todo.append(const)
    return found
