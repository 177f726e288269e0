"""The digest's sum rebuilt from every entity of a state (O(state)).

``SchedulerState.recompute_digest`` compares it with the running sum (tests), a restore
starts from it, and the switch to another digest scheme (``versions.DIGEST_V2_RELEASE``)
rebuilds the sum in the new scheme with it. Every owner's entities, with the fingerprint
function each owner passes to ``DigestSum`` as it changes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from raftsched.core import digest as dg
from raftsched.core.digest_sum import DigestSum
from raftsched.core.results import Result
from raftsched.core.secret_table import fp_secret

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def rebuilt_sum(
    state: SchedulerState,
    requests: Iterable[tuple[str, Result]],
    scheme: int,
    outbox_share: int | None = None,
) -> int:
    """The entities' sum in ``scheme``; ``requests``: the request-id memory's items;
    ``outbox_share``: the outbox's share, when known (see Outbox.load)."""
    acc = DigestSum(scheme)
    for dag_id, record in state.catalog.records.items():
        acc.add(dg.fp_dag, dag_id, record)
    for rec in state.run_table.records():
        acc.add(dg.fp_run, rec.run, rec.spec.spec_hash, rec.row_seq)
        for ti in rec.tis.values():
            acc.add(dg.fp_ti, ti)
    if outbox_share is not None:
        acc.value = (acc.value + outbox_share) % dg.MOD
    for entry in state.outbox if outbox_share is None else ():
        acc.add(dg.fp_outbox, entry)
    for request_id, result in requests:
        acc.add(dg.fp_request, request_id, result)
    for slot, when in state.run_table.evicted_slots():
        acc.add(dg.fp_slot, slot, when)
    for key, until in state.task_queue.fences():
        acc.add(dg.fp_fence, key, until)
    for ref, secret in state.secrets.items():
        acc.add(fp_secret, ref, secret)
    for fp, args in state.callbacks.fingerprints():
        acc.add(fp, *args)
    return acc.value
