"""Who may read a variable or connection: the DAGs it is restricted to (docs/architecture.md §22).

A variable or connection set with ``--dags a,b`` (``SetSecret.dags``, kept on the record as
``SecretRecord.dags``) may be read only by tasks of those DAGs, declared or on demand; one set
without is readable by every DAG, as under Airflow. The node that decrypts a value for a worker
asks :func:`refusal` (``api/servicers/secrets.py``), and apply asks it again for an on-demand
read (``core/secret_reads.py``), so a read refused here never reaches a task.

Bounds of on-demand reads are here too: the worker, the node and the core check the same ones.
Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftsched.core import limits as lim
from raftsched.errors import LimitExceeded

MAX_SECRET_DAGS = 50  # DAGs one variable or connection may be restricted to
MAX_ON_DEMAND_READS = 64  # undeclared reads of one attempt (the worker counts; names, not bytes)
MAX_NAMES_PER_READ = 16  # names of one ReadSecrets command


def check_dags(field: str, dags: object) -> tuple[str, ...]:
    """``dags`` as a SetSecret carries it: a tuple of distinct DAG ids, sorted, at most
    :data:`MAX_SECRET_DAGS`. LimitExceeded otherwise."""
    if not isinstance(dags, tuple):
        raise LimitExceeded(field, "must be a tuple of DAG ids")
    out = lim.check_ids(field, dags, MAX_SECRET_DAGS)
    if list(out) != sorted(set(out)):
        raise LimitExceeded(field, "must be distinct and sorted")
    return out


def normalized(dags: Iterable[str]) -> tuple[str, ...]:
    """What a caller's list becomes on the record: distinct, sorted, blanks dropped."""
    return tuple(sorted({d.strip() for d in dags if d.strip()}))


def allows(dags: tuple[str, ...], dag_id: str) -> bool:
    return not dags or dag_id in dags


def refusal(kind: str, key: str, dags: tuple[str, ...], dag_id: str) -> str | None:
    """Why DAG ``dag_id`` may not read ``kind`` ``key`` (None: it may). Names no value."""
    if allows(dags, dag_id):
        return None
    return f"{kind} {key} is restricted to DAGs {','.join(dags)}: DAG {dag_id} may not read it"


__all__ = [
    "MAX_NAMES_PER_READ",
    "MAX_ON_DEMAND_READS",
    "MAX_SECRET_DAGS",
    "allows",
    "check_dags",
    "normalized",
    "refusal",
]
