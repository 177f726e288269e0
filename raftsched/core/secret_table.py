"""The secret table: variables and connections, as Fernet tokens only.

Owns the records by (kind, key), kind "variable" or "connection". Guarantees: each record's
fingerprint (:func:`fp_secret`) is in the shared digest sum exactly while it is held; the
table holds ciphertext, never a value (``handlers_secrets`` says who encrypts). The table
joins the snapshot only when it has entries (``SchedulerState.snapshot``). Raises
``KeyError`` from :meth:`delete` of a record not held (handlers check first).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.added_fields import added_field
from raftsched.core.model import parse_utc, utc_iso

SecretKey = tuple[str, str]  # (kind, key)


@dataclass(frozen=True, slots=True)
class SecretRecord:
    ciphertext: str  # a Fernet token
    description: str
    updated_at: datetime
    # The DAGs that may read it (core/secret_policy.py); empty: every DAG
    dags: tuple[str, ...] = added_field(())


def fp_secret(key: SecretKey, record: SecretRecord) -> str:
    return "secret:" + dg.canonical((key[0], key[1], record))


class SecretTable:
    __slots__ = ("_records", "_sum")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._records: dict[SecretKey, SecretRecord] = {}
        self._sum = digest_sum

    def __len__(self) -> int:
        return len(self._records)

    def __bool__(self) -> bool:
        return bool(self._records)

    def get(self, ref: SecretKey) -> SecretRecord | None:
        return self._records.get(ref)

    def items(self) -> Iterator[tuple[SecretKey, SecretRecord]]:
        return iter(self._records.items())

    def of_kind(self, kind: str) -> dict[str, SecretRecord]:
        """Variables or connections (``kind``) by name."""
        return {key: rec for (k, key), rec in self._records.items() if k == kind}

    def put(self, ref: SecretKey, record: SecretRecord) -> None:
        old = self._records.get(ref)
        if old is not None:
            self._sum.remove(fp_secret(ref, old))
        self._records[ref] = record
        self._sum.add(fp_secret(ref, record))

    def delete(self, ref: SecretKey) -> None:
        self._sum.remove(fp_secret(ref, self._records.pop(ref)))

    def to_list(self) -> list[list[Any]]:
        return secrets_to_list(self._records)

    def load(self, items: Any) -> None:
        """Restore (a snapshot's ``secrets``); the caller recomputes the digest."""
        self._records = secrets_from_list(items)


# -- snapshot ------------------------------------------------------------------------------


def secrets_to_list(table: dict[SecretKey, SecretRecord]) -> list[list[Any]]:
    # the DAGs only when restricted: a table without any snapshots as before
    return [
        [kind, key, rec.ciphertext, rec.description, utc_iso(rec.updated_at)]
        + ([list(rec.dags)] if rec.dags else [])
        for (kind, key), rec in table.items()
    ]


def secrets_from_list(items: Any) -> dict[SecretKey, SecretRecord]:
    out: dict[SecretKey, SecretRecord] = {}
    for item in items or ():
        kind, key, ciphertext, description, updated_at = item[:5]
        when = parse_utc(updated_at)
        assert when is not None
        dags = tuple(str(d) for d in item[5]) if len(item) > 5 else ()
        out[(str(kind), str(key))] = SecretRecord(str(ciphertext), str(description), when, dags)
    return out
