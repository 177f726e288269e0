"""The commands of pools (docs/architecture.md §19), in a module of their own: the classes of
``core/commands.py`` are pickled by module path in the Raft log and that module may not grow.
Both are new in release 3, so the upgrade gate (core/versions.py) refuses them while an older
node remains; ``handlers_pools`` applies them."""

from __future__ import annotations

from dataclasses import dataclass

from raftsched.core.commands import Command


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPool(Command):
    """Create a pool or change its slots and description (a pool shrunk below the slots in
    use grants nothing until enough of its attempts end; none is stopped)."""

    name: str
    slots: int
    description: str = ""
    actor: str = ""  # who asked (core/audit.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletePool(Command):
    """Remove a pool: its queued tasks wait (an unknown pool grants nothing) and its running
    attempts go on; ``default_pool`` deleted is unlimited again."""

    name: str
    actor: str = ""
