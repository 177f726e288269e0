"""Every error raftsched raises on purpose. Each names the offending value and the way out.

Each class says how an API answers it: ``status``, a gRPC status code by name (this module
imports no gRPC: the core raises these too). ``raftsched.api.status.status_of`` is the one
mapping to gRPC status codes, :func:`http_status` the one from those codes to HTTP (the REST
API and the web pages). Subclasses carry the data a caller can act on (``DagNotFound.dag_id``,
``NoQuorumError.reachable``, ``MigrationRequired.current``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module imports no gRPC (the core imports it)
    import grpc

# How to make a Fernet key (SecretsNotConfigured's way out; the secrets messages repeat it)
GENERATE_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)

# gRPC status code (by name) -> HTTP status: the one table (REST API, pages, gateway errors).
HTTP_STATUS: dict[str, int] = {
    "OK": 200,
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "FAILED_PRECONDITION": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


def http_status(status: str) -> int:
    """The HTTP status for a gRPC status code name (500 for one not in the table)."""
    return HTTP_STATUS.get(status, 500)


class RaftschedError(Exception):
    """Base of all raftsched errors. ``str(err)`` is one line a person can act on."""

    #: how the API answers this error: a gRPC status code, by name (a subclass, or an
    #: instance that carries a code it was given, sets its own)
    status: str = "FAILED_PRECONDITION"

    @property
    def http_status(self) -> int:
        return http_status(self.status)


class ConfigError(RaftschedError):
    status = "INVALID_ARGUMENT"

    def __init__(self, message: str, *, source: str = "", key: str = "", value: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.key = key
        self.value = value


class TaskUserError(ConfigError):
    """``[worker] run_as_user`` names no usable user (missing, root, or one this worker
    cannot switch to): the message says which and what to do. The worker does not start."""

    def __init__(self, message: str) -> None:
        super().__init__(message, key="worker.run_as_user")


class DagDefinitionError(RaftschedError):
    """A DAG file defines something invalid (bad id, cycle, invalid cron, unknown zone...)."""

    status = "INVALID_ARGUMENT"

    def __init__(self, message: str, *, dag_id: str = "", task_id: str = "") -> None:
        super().__init__(message)
        self.dag_id = dag_id
        self.task_id = task_id


class DagNotFound(RaftschedError):
    status = "NOT_FOUND"

    def __init__(self, dag_id: str) -> None:
        super().__init__(f"DAG {dag_id!r} not found; `raftsched dags list` shows the known DAGs")
        self.dag_id = dag_id


class SnapshotVersionError(RaftschedError):
    status = "FAILED_PRECONDITION"

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"snapshot schema_version {found} is newer than this release supports ({supported});"
            " upgrade raftsched on this node before it rejoins the cluster"
        )
        self.found = found
        self.supported = supported


class ReplayRefused(RaftschedError):
    """`raftsched debug replay` cannot read this data dir (no journal, several nodes, another
    journal or snapshot format): the message says which and what to do."""

    status = "FAILED_PRECONDITION"


class UpgradeUnfinished(RaftschedError):
    """A command of a newer release than the cluster version (core/versions.py): a node of
    the older release could not apply it. Finish upgrading every node first."""

    status = "FAILED_PRECONDITION"


class ReleaseTooOld(RaftschedError):
    """This node's release is older than the cluster version its log or snapshot carries: the
    upgrade was finalized, and this release cannot apply what followed."""

    status = "FAILED_PRECONDITION"

    def __init__(self, cluster_version: int, release: int) -> None:
        super().__init__(
            f"the cluster version is {cluster_version} but this node runs release {release}:"
            " the upgrade was finalized and cannot be rolled back; run a release >= the"
            " cluster version on this node (or replace it: README, Replacing a dead node)"
        )
        self.cluster_version = cluster_version
        self.release = release


class NoQuorumError(RaftschedError):
    """A replicated call could not be committed, or no node answered: no majority is reachable
    right now. ``reachable``/``total`` count the nodes when the raiser knows them."""

    status = "UNAVAILABLE"

    def __init__(
        self, message: str, *, reachable: int | None = None, total: int | None = None
    ) -> None:
        super().__init__(message)
        self.reachable = reachable
        self.total = total


class CommitTimeout(RaftschedError):
    """A replicated call's outcome is unknown; retry with the same request id."""

    status = "DEADLINE_EXCEEDED"

    def __init__(self, request_id: str, seconds: float) -> None:
        super().__init__(
            f"command {request_id} not confirmed within {seconds:.1f}s; its outcome is unknown,"
            " retrying with the same request id is safe"
        )
        self.request_id = request_id
        self.seconds = seconds


class StoreUnavailable(RaftschedError):
    """The metadata database cannot be reached; work continues from the Raft log. ``url`` is
    the database (without its password) when the raiser knows it."""

    status = "UNAVAILABLE"

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class MigrationRequired(RaftschedError):
    """The metadata database's schema is not this release's: ``current`` (None: no schema)
    and ``head`` are Alembic revisions when known; the message says which command fixes it."""

    def __init__(
        self, message: str, *, current: str | None = None, head: str | None = None
    ) -> None:
        super().__init__(message)
        self.current = current
        self.head = head


class LimitExceeded(RaftschedError, ValueError):
    """A value a client, a DAG file or a task sent breaks a bound of ``raftsched.core.limits``.

    ``field`` names the value, ``limit`` and ``size`` (when known) say by how much; the API
    answers INVALID_ARGUMENT with ``str(err)``.
    """

    status = "INVALID_ARGUMENT"

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

    status = "RESOURCE_EXHAUSTED"

    def __init__(self, entries: int, cap: int) -> None:
        super().__init__(
            f"the cluster's outbox holds {entries} entries (hard cap {cap}): the metadata DB is"
            " behind or unreachable; new leases and log appends wait until it catches up"
            " (see `raftsched cluster status`)"
        )
        self.entries = entries
        self.cap = cap


class MembershipBusy(RaftschedError):
    """Another membership change is still uncommitted (one change at a time)."""

    def __init__(self, address: str) -> None:
        super().__init__(
            f"cannot change the membership for {address}: another membership change is in"
            " progress; retry once it has committed"
        )
        self.address = address


class MembershipUnconfirmed(RaftschedError):
    """A membership change was not confirmed in time: its outcome is unknown."""

    status = "DEADLINE_EXCEEDED"

    def __init__(self, address: str, seconds: float) -> None:
        super().__init__(
            f"the membership change for {address} was not confirmed in {seconds:g}s;"
            " check `raftsched cluster status` before retrying"
        )
        self.address = address
        self.seconds = seconds


class PasswordChecksBusy(RaftschedError):
    """A scheduler node is already checking a password (VerifyUser): it checks one at a time,
    so logins never take the CPU its Raft thread needs."""

    status = "RESOURCE_EXHAUSTED"

    def __init__(self, retry_after: float) -> None:
        super().__init__(
            f"this node is checking another password; retry in {retry_after:g}s (webservers"
            " check passwords themselves with GetPasswordHash and never need VerifyUser)"
        )
        self.retry_after = retry_after


class LoginThrottled(RaftschedError):
    """Too many login attempts: from one client (``scope`` "client"), for one user name
    ("user"), or more logins at once than this webserver process checks ("busy")."""

    status = "RESOURCE_EXHAUSTED"

    def __init__(self, scope: str, retry_after: float) -> None:
        wait = max(1, round(retry_after))
        what = {
            "client": "Too many login attempts from your address.",
            "user": "Too many failed logins for this user name.",
        }.get(scope, "The server is busy checking other logins.")
        super().__init__(f"{what} Try again in {wait} second{'s' if wait != 1 else ''}.")
        self.scope = scope
        self.retry_after = float(wait)


class RaftPortUnreachable(RaftschedError):
    """A node's Raft port did not answer an admin message (leadership transfer)."""

    status = "UNAVAILABLE"

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach the Raft port {address}: {reason}")
        self.address = address
        self.reason = reason


class NoFencingToken(RaftschedError):
    """Code that fences its writes (``raftsched.fencing``) runs outside an attempt, or was
    handed a token that is not a positive integer."""

    def __init__(self, value: str) -> None:
        super().__init__(
            f"no fencing token ({value!r}): RAFTSCHED_FENCING_TOKEN is set only inside a task"
            " attempt run by a raftsched worker; pass token= explicitly elsewhere"
        )
        self.value = value


class TriggerError(RaftschedError):
    """A deferred task's trigger cannot run (an unknown kind, bad arguments, a user-defined
    trigger class that is not there): the triggerer reports it as the trigger's error, and
    the task's attempt fails with it in its log."""

    status = "INVALID_ARGUMENT"


class SecretsNotConfigured(RaftschedError):
    """No Fernet key: values can be neither stored nor read."""

    def __init__(self) -> None:
        super().__init__(
            "no encryption key for variables and connections: set [secrets] fernet_key (or"
            " RAFTSCHED__SECRETS__FERNET_KEY) to the same key on every scheduler node; make"
            f" one with: {GENERATE_KEY}"
        )


class SecretDecryptError(RaftschedError):
    """A stored value that none of the configured keys decrypts."""


class TaskLoadError(Exception):
    """The function cannot be found or called: the message says which and why."""


class WorkerRejected(RaftschedError):
    """The cluster will never serve this worker as configured (e.g. its token is refused)."""


class ReadRefused(Exception):
    """A read the task gets as an error: ``code`` (one of the module's codes) and a message
    that names no value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class SecretAccessDenied(PermissionError):
    """The task's DAG may not read it, or the worker refused the read (the message says)."""


class ApiError(RaftschedError):
    """A call failed with a gRPC status other than "every node unavailable".

    ``code`` is the ``grpc.StatusCode``; ``message`` the server's (actionable) message;
    ``address`` the node that answered; ``method`` the RPC's name.
    """

    def __init__(
        self, code: grpc.StatusCode, message: str, *, address: str = "", method: str = ""
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.address = address
        self.method = method


class StatusError(RaftschedError):
    """Raise inside a servicer method to answer ``code`` with ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = code.name
        self.message = message


class NotANodeDir(ValueError):
    """The directory holds no raftsched journal, or one of another format."""


class TemplateError(Exception):
    """A template that cannot be rendered: names what (``command``, ``env[X]``, ``kwargs.x``),
    the line, and the cause."""


class RenderLimitExceeded(Exception):
    """The helper ran out of memory or time, or died: ``str()`` says which, for people."""


class XComError(Exception):
    """A return value that cannot be kept, or an argument that cannot be resolved."""


class TaskSkipped(Exception):  # Airflow: AirflowSkipException
    """Raise it in a Python task to end the attempt SKIPPED (downstream: per trigger rules)."""


class UserError(RaftschedError):
    """A user cannot be created as asked (bad role, empty password, name taken)."""

    def __init__(self, message: str, *, username: str) -> None:
        super().__init__(message)
        self.username = username


class OutboxGap(RaftschedError):
    """Outbox entries do not continue the DB watermark: writing them would lose entries."""

    def __init__(self, watermark: int, seqs: Sequence[int]) -> None:
        shown = ", ".join(map(str, seqs[:5])) + (", ..." if len(seqs) > 5 else "")
        super().__init__(
            f"outbox entries [{shown}] do not continue the DB watermark {watermark}"
            f" (expected {watermark + 1}, {watermark + 2}, ... without gaps): this is a bug,"
            " nothing was written"
        )
        self.watermark = watermark
        self.seqs = tuple(seqs)


class LogDbMismatch(RaftschedError):
    """The metadata DB and the replicated outbox disagree; nothing may be written or acked."""
