"""The running sum of the state digest's shares, in one of the two schemes.

Owners that hold entities (``changes``, ``outbox``, ``request_memory``, ``run_table``,
``task_queue``, ``secret_table``, ``callback_table``) add and remove their entities' shares
here, passing the entity's fingerprint function and its arguments; the scheme decides what
the share is (``digest`` v1: a hash of the canonical text, ``digest_v2``: a hash of the
values). Kept apart from both so that neither scheme's module imports the other's user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftsched.core import digest as dg
from raftsched.core import digest_v2 as v2


class DigestSum:
    """The running sum of the entities' shares, in one scheme: 1 (``contribution`` of the
    canonical text) or 2 (``digest_v2.share`` of the values). Owners pass a fingerprint
    function and its arguments, not a text, so that v2 never renders one."""

    __slots__ = ("scheme", "value")

    def __init__(self, scheme: int = 1) -> None:
        self.value = 0
        self.scheme = scheme

    def share(self, fp: Callable[..., str], *args: Any) -> int:
        """The share of the entity ``fp(*args)`` fingerprints, in this sum's scheme."""
        if self.scheme == 1:
            return dg.contribution(fp(*args))
        return v2.share(fp, args)

    # add and remove spell share out: a call less per entity (apply's hottest path)
    def add(self, fp: Callable[..., str], *args: Any) -> None:
        share = dg.contribution(fp(*args)) if self.scheme == 1 else v2.share(fp, args)
        self.value = (self.value + share) % dg.MOD

    def remove(self, fp: Callable[..., str], *args: Any) -> None:
        share = dg.contribution(fp(*args)) if self.scheme == 1 else v2.share(fp, args)
        self.value = (self.value - share) % dg.MOD
