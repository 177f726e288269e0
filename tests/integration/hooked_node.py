"""``raftsched`` with the test hooks of :mod:`tests.integration.node_hooks` installed on the
scheduler node: the entry point the harness starts a node with when its environment asks for
a hook (``RAFTSCHED_TEST_*``). Same arguments as ``python -m raftsched``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.*, when run as a script

from raftsched.cli.main import main
from raftsched.cluster import runtime
from tests.integration.node_hooks import install


class HookedNode(runtime.SchedulerNode):
    """The scheduler node, with the hooks its environment asks for installed once it is built
    (where the runtime used to install them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install(self)


if __name__ == "__main__":
    runtime.SchedulerNode = HookedNode  # type: ignore[misc]  # the one node class it builds
    sys.exit(main())
