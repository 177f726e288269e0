"""Admin messages to a node's Raft port (pysyncobj's utility protocol).

``send(address, secret, message, timeout)`` opens one connection to the Raft port at
``address`` (encrypted with the cluster secret, as the nodes' own traffic), sends ``message``
(a list of strings, e.g. ``["transfer", target]``) and returns the node's answer as text; it
raises :class:`~raftsched.errors.RaftPortUnreachable` when the port does not answer in
``timeout`` seconds. The message runs on that node's tick thread, where its transport and
match indexes live: this is how ``cluster transfer-leader`` and a leader's own handover ask
for pysyncobj's ``transferLeadership``. Thread-safe (one connection per call).
"""

from __future__ import annotations

from raftsched.errors import RaftPortUnreachable


def send(address: str, secret: str, message: list[str], timeout: float) -> str:
    from pysyncobj.utility import TcpUtility, UtilityException

    utility = TcpUtility(password=secret or None, timeout=timeout)
    try:
        return str(utility.executeCommand(address, message))
    except UtilityException as err:
        raise RaftPortUnreachable(address, str(err)) from None
