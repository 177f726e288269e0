"""raftsched: a highly available workflow scheduler.

The public authoring API: ``from raftsched import DAG, BashTask, PythonTask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["DAG", "BashTask", "PythonTask", "__version__"]

if TYPE_CHECKING:
    from raftsched.dags.authoring import DAG, BashTask, PythonTask


def __getattr__(name: str) -> Any:
    # Lazy, so that `import raftsched.core` (inside Raft apply) never pulls in the authoring API.
    if name in ("DAG", "BashTask", "PythonTask"):
        from raftsched.dags import authoring

        return getattr(authoring, name)
    raise AttributeError(f"module 'raftsched' has no attribute {name!r}")
