"""Every error raftsched raises on purpose. Each names the offending value and the way out."""

from __future__ import annotations


class RaftschedError(Exception):
    """Base of all raftsched errors. ``str(err)`` is one line a person can act on."""


class ConfigError(RaftschedError):
    def __init__(self, message: str, *, source: str = "", key: str = "", value: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.key = key
        self.value = value


class DagDefinitionError(RaftschedError):
    """A DAG file defines something invalid (bad id, cycle, invalid cron, unknown zone...)."""

    def __init__(self, message: str, *, dag_id: str = "", task_id: str = "") -> None:
        super().__init__(message)
        self.dag_id = dag_id
        self.task_id = task_id


class DagNotFound(RaftschedError):
    def __init__(self, dag_id: str) -> None:
        super().__init__(f"DAG {dag_id!r} not found; `raftsched dags list` shows the known DAGs")
        self.dag_id = dag_id


class SnapshotVersionError(RaftschedError):
    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"snapshot schema_version {found} is newer than this release supports ({supported});"
            " upgrade raftsched on this node before it rejoins the cluster"
        )
        self.found = found
        self.supported = supported


class NotLeaderError(RaftschedError):
    def __init__(self, leader_hint: str | None) -> None:
        hint = f"; the leader is {leader_hint}" if leader_hint else "; no leader is known yet"
        super().__init__(f"this node is not the leader{hint}")
        self.leader_hint = leader_hint


class NoQuorumError(RaftschedError):
    """A replicated call could not be committed: no majority is reachable right now."""


class CommitTimeout(RaftschedError):
    """A replicated call's outcome is unknown; retry with the same request id."""

    def __init__(self, request_id: str, seconds: float) -> None:
        super().__init__(
            f"command {request_id} not confirmed within {seconds:.1f}s; its outcome is unknown,"
            " retrying with the same request id is safe"
        )
        self.request_id = request_id


class StoreUnavailable(RaftschedError):
    """The metadata database cannot be reached; work continues from the Raft log."""


class MigrationRequired(RaftschedError):
    pass


class LimitExceeded(RaftschedError, ValueError):
    """A value a client, a DAG file or a task sent breaks a bound of ``raftsched.core.limits``.

    ``field`` names the value, ``limit`` and ``size`` (when known) say by how much; the API
    answers INVALID_ARGUMENT with ``str(err)``.
    """

    def __init__(
        self, field: str, problem: str, *, limit: int | None = None, size: int | None = None
    ) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem
        self.limit = limit
        self.size = size


class OutboxFull(RaftschedError):
    """The replicated outbox reached its hard cap (the metadata DB is behind or away)."""

    def __init__(self, entries: int, cap: int) -> None:
        super().__init__(
            f"the cluster's outbox holds {entries} entries (hard cap {cap}): the metadata DB is"
            " behind or unreachable; new leases and log appends wait until it catches up"
            " (see `raftsched cluster status`)"
        )
        self.entries = entries
        self.cap = cap
