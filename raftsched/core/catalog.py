"""The DAG catalog: DAG records, the DAG versions (specs) in use, and import errors.

Owns the record of every DAG ever registered (removed ones stay, inactive), the specs by
hash with their reference counts and topologies, and the current import errors.
Guarantees: a spec is held exactly while something refers to it (the current version of a
DAG, or the version a live run executes: :meth:`ref_spec` / :meth:`unref_spec`), so equal
specs are shared; a held spec's ``Topology`` is built the first time a run needs it (most of
100,000 DAGs have no live run: neither restore nor memory pays for theirs). DAG records are
never dropped.
The digest share of records is kept by ``core.changes.set_dag`` (the only writer of
:meth:`put`); import errors are folded into the digest by the state. Raises ``KeyError``
only on a bug (a spec unreferenced more times than referenced).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from raftsched.core.model import DagRecord, DagSpec, ImportErrorRecord
from raftsched.core.ready import Topology


class DagCatalog:
    __slots__ = (
        "_dags",
        "_spec_refs",
        "_specs",
        "_topologies",
        "_with_deadline",
        "_with_timeout",
        "import_errors",
    )

    def __init__(self) -> None:
        self._specs: dict[str, DagSpec] = {}  # by spec_hash: current DAG versions + run versions
        self._spec_refs: dict[str, int] = {}
        self._topologies: dict[str, Topology] = {}
        self._dags: dict[str, DagRecord] = {}
        # derived: the leader asks every tick which DAGs have a deadline (of 100,000, few)
        self._with_deadline: dict[str, None] = {}
        self._with_timeout: dict[str, None] = {}  # and which have a dagrun_timeout
        self.import_errors: tuple[ImportErrorRecord, ...] = ()

    # -- DAG records ------------------------------------------------------------------------

    @property
    def records(self) -> Mapping[str, DagRecord]:
        """Every DAG's record by dag_id, in registration order (read-only)."""
        return MappingProxyType(self._dags)

    @property
    def with_deadline(self) -> Iterable[str]:
        """The dag_ids whose current spec has a ``deadline``, in no set order."""
        return tuple(self._with_deadline)

    @property
    def with_timeout(self) -> Iterable[str]:
        """The dag_ids whose current spec has a ``dagrun_timeout``, in no set order."""
        return tuple(self._with_timeout)

    def get(self, dag_id: str) -> DagRecord | None:
        return self._dags.get(dag_id)

    def put(self, record: DagRecord) -> None:
        """Set the DAG's record (``changes.set_dag`` calls this, keeping the digest)."""
        dag_id = record.spec.dag_id
        self._dags[dag_id] = record
        if record.spec.deadline_seconds is None:
            self._with_deadline.pop(dag_id, None)
        else:
            self._with_deadline[dag_id] = None
        if getattr(record.spec, "dagrun_timeout_seconds", None) is None:
            self._with_timeout.pop(dag_id, None)
        else:
            self._with_timeout[dag_id] = None

    # -- specs ------------------------------------------------------------------------------

    @property
    def specs(self) -> Mapping[str, DagSpec]:
        """Held specs by hash, in the order first held (the snapshot's order)."""
        return MappingProxyType(self._specs)

    def topology(self, spec_hash: str) -> Topology:
        """The held spec's shape (derived, built on first use and kept while the spec is)."""
        topo = self._topologies.get(spec_hash)
        if topo is None:
            topo = self._topologies[spec_hash] = Topology(self._specs[spec_hash])
        return topo

    def ref_spec(self, spec: DagSpec) -> DagSpec:
        """One more reference to ``spec``; the shared copy of it."""
        shared = self._specs.get(spec.spec_hash)
        if shared is None:
            shared = self._specs[spec.spec_hash] = spec
        self._spec_refs[spec.spec_hash] = self._spec_refs.get(spec.spec_hash, 0) + 1
        return shared

    def unref_spec(self, spec_hash: str) -> None:
        """One reference fewer; the spec goes when none is left."""
        self._spec_refs[spec_hash] -= 1
        if not self._spec_refs[spec_hash]:
            del self._spec_refs[spec_hash], self._specs[spec_hash]
            self._topologies.pop(spec_hash, None)

    # -- restore ----------------------------------------------------------------------------

    def load(self, specs: Iterable[DagSpec], records: Iterable[DagRecord]) -> None:
        """Restore: hold ``specs`` in this order (unreferenced until referred to), then the
        records, each referring to its spec. Runs then refer to theirs (``ref_spec``)."""
        for spec in specs:
            self._specs[spec.spec_hash] = spec
            self._spec_refs[spec.spec_hash] = 0
        for record in records:
            self.put(record)
            self.ref_spec(record.spec)
