"""The raftsched.v1 servicers of one scheduler node (built by ``raftsched.api.node_api``)."""

from raftsched.api.servicers.cluster import ClusterServicer
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.dags import DagServicer
from raftsched.api.servicers.users import UserServicer
from raftsched.api.servicers.workers import QueueSignal, WorkerServicer

__all__ = [
    "ApiContext",
    "ClusterServicer",
    "DagServicer",
    "QueueSignal",
    "UserServicer",
    "WorkerServicer",
]
