"""The outbox's digest share that snapshots carry (core/outbox.py ``Outbox.load``).

A restore takes the outbox entries' share of the digest from the snapshot instead of
fingerprinting every entry again (most of a restore's digest work at 100,000 DAGs); a
snapshot without it (an older release's, or ``store rebuild``'s) is fingerprinted. The share
is checked entry by entry as the entries are acknowledged: a restored entry that differs from
the snapshotted one shows as a digest unlike the original's once it is acked.
"""

from __future__ import annotations

import copy
import json

from test_state_harness import T0, Sim, at, dag, task

from raftsched.core import commands as c
from raftsched.core.state import SchedulerState


def busy() -> Sim:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a")), dag("e", task("x")))
    for day in range(3):
        sim.create("d", T0.replace(day=1 + day), now=at(day))
    for grant in sim.lease(n=2, now=at(5)):
        sim.complete(grant, now=at(6))
    return sim


def ack_all(state: SchedulerState, index: int) -> None:
    ack = c.AckMaterialized(request_id="ack", now=at(10), seq=state.outbox_last_seq)
    assert state.apply(ack, log_index=index).ok


def test_restore_carries_the_outbox_share_and_agrees_with_a_recompute() -> None:
    sim = busy()
    snap = sim.state.snapshot()
    assert "digest_share" in snap["outbox"]
    restored = SchedulerState.restore(json.loads(json.dumps(snap)))
    assert restored.digest() == sim.state.digest() == restored.recompute_digest()
    assert restored.snapshot() == snap


def test_a_snapshot_without_the_share_is_fingerprinted_to_the_same_digest() -> None:
    sim = busy()
    snap = sim.state.snapshot()
    del snap["outbox"]["digest_share"]  # as an older release wrote it
    restored = SchedulerState.restore(snap)
    assert restored.digest() == sim.state.digest() == restored.recompute_digest()
    ack_all(restored, sim.index + 1)
    ack_all(sim.state, sim.index + 1)
    assert restored.digest() == sim.state.digest()


def test_a_restored_entry_unlike_the_snapshotted_one_diverges_once_acked() -> None:
    sim = busy()
    snap = copy.deepcopy(sim.state.snapshot())
    entry = snap["outbox"]["entries"][-1]
    entry[2] = {**entry[2], "state": "tampered"}  # restored differently, same carried share
    restored = SchedulerState.restore(snap)
    assert restored.digest() == sim.state.digest()  # the carried share: not seen yet
    assert restored.recompute_digest() != sim.state.digest()  # a full check sees it
    ack_all(restored, sim.index + 1)
    ack_all(sim.state, sim.index + 1)
    assert restored.digest() != sim.state.digest()  # and so does the ack


def test_restore_then_apply_equals_applying_on_the_original() -> None:
    sim = busy()
    twin = Sim()
    twin.state = SchedulerState.restore(sim.state.snapshot())
    twin.index, twin.requests = sim.index, sim.requests
    for s in (sim, twin):
        s.create("e", T0, now=at(20))  # its spec's shape is built on first use after restore
        for grant in s.lease(n=5, now=at(21)):
            s.complete(grant, now=at(22))
        ack_all(s.state, s.index + 1)
        s.index += 1
    assert twin.state.snapshot() == sim.state.snapshot()
    assert twin.state.digest() == sim.state.digest() == twin.state.recompute_digest()
