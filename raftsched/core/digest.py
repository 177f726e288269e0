"""An incremental, order-independent digest of the replicated state.

Every entity (DAG record, run, task instance, outbox entry, remembered request) contributes
``blake2b(fingerprint)`` to a sum modulo 2**128; apply subtracts an entity's old contribution
before changing it and adds the new one after. So ``digest()`` costs O(1) however big the
state, equal states give equal digests whatever order they were built in, and replicas at the
same applied index can compare digests to detect divergence (shared/PYSYNCOBJ.md).
``SchedulerState.recompute_digest()`` rebuilds the sum from scratch (tests compare the two).

Fingerprints are ``repr`` of plain values: deterministic across processes (no ``hash()``,
whose str hashing is salted per process).
"""

from __future__ import annotations

import hashlib
from typing import Any

_MOD = 1 << 128


def contribution(fingerprint: str) -> int:
    return int.from_bytes(hashlib.blake2b(fingerprint.encode(), digest_size=16).digest())


class DigestSum:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def add(self, fingerprint: str) -> None:
        self.value = (self.value + contribution(fingerprint)) % _MOD

    def remove(self, fingerprint: str) -> None:
        self.value = (self.value - contribution(fingerprint)) % _MOD


def fp_dag(dag_id: str, record: Any) -> str:
    return "dag:" + repr(
        (
            dag_id,
            record.spec.spec_hash,
            record.paused,
            record.active,
            record.updated_at,
            record.last_logical_date,
        )
    )


def fp_run(run: Any, spec_hash: str, row_seq: int) -> str:
    return "run:" + repr((run, spec_hash, row_seq))


def fp_ti(ti: Any) -> str:
    return "ti:" + repr(ti)


def fp_outbox(entry: Any) -> str:
    return "ob:" + repr((entry.seq, str(entry.kind), entry.data))


def fp_request(request_id: str, result: Any) -> str:
    return "rq:" + repr((request_id, result))


def finish(total: int, *scalars: Any) -> str:
    text = f"{total:032x}:{scalars!r}"
    return hashlib.sha256(text.encode()).hexdigest()
