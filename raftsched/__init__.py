"""raftsched: a highly available workflow scheduler.

The public authoring API: ``from raftsched import DAG, BashTask, PythonTask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one place of the version: pyproject.toml reads it ([tool.setuptools.dynamic]); the
# protocol number of this release is raftsched.core.versions.RELEASE.
__version__ = "0.3.0"
__all__ = [
    "DAG",
    "Asset",
    "AssetAll",
    "AssetAny",
    "AssetWatcher",
    "BashTask",
    "EmptyTask",
    "Param",
    "PythonTask",
    "TaskSkipped",
    "__version__",
    "chain",
    "dag",
    "task",
]
_AUTHORING = frozenset(
    {"DAG", "BashTask", "EmptyTask", "PythonTask", "Param", "TaskSkipped", "chain", "dag", "task"}
    | {"Asset", "AssetAll", "AssetAny", "AssetWatcher"}
)

if TYPE_CHECKING:
    from raftsched.dags.authoring import (
        DAG,
        Asset,
        AssetAll,
        AssetAny,
        AssetWatcher,
        BashTask,
        EmptyTask,
        Param,
        PythonTask,
        chain,
        dag,
        task,
    )
    from raftsched.errors import TaskSkipped


def __getattr__(name: str) -> Any:
    # Lazy, so that `import raftsched.core` (inside Raft apply) never pulls in the authoring API.
    if name in _AUTHORING:
        from raftsched.dags import authoring

        return getattr(authoring, name)
    raise AttributeError(f"module 'raftsched' has no attribute {name!r}")
