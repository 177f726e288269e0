"""Raft settings of one scheduler node, from the config, and the pysyncobj ``SyncObjConf``.

What is chosen and why (measured on 2 cores, 3 nodes on loopback; docs/architecture.md §9):

- ``bindAddress`` is always this node's own ``host:port`` (pysyncobj binds 0.0.0.0 otherwise).
- ``password`` is the cluster secret: Raft traffic is encrypted and authenticated. An empty
  secret is accepted only when every node is on loopback.
- ``raftMinTimeout`` 0.15 / ``raftMaxTimeout`` 0.45 / ``appendEntriesPeriod`` 0.03 /
  ``connectionTimeout`` 1.0: a killed leader is replaced after the earlier of the two
  survivors' timeouts (~0.25 s on average, 0.45 s at most) plus one vote round; a follower
  stands only after 150 ms (five heartbeats) without word from the leader. This holds because
  nothing blocks the tick thread (the journal fsyncs on its own thread), every link carries a
  keep-alive (no stale link loses the vote request) and a follower wakes at its deadline and
  reads its sockets before standing (``raft/group_commit.py``; docs/architecture.md §9).
- ``leaderFallbackTimeout`` 1.5 s: a leader cut off from the majority steps down (and its
  leader loop stops) within ~2 s instead of pysyncobj's 30 s.
- ``appendEntriesUseBatch`` off: a command is sent as soon as it is queued (~1 ms commit on
  loopback instead of waiting for the next heartbeat). We batch decisions inside our own
  commands, so the library's batching buys little.
- ``useFork`` off and a custom serializer: snapshots are ``SchedulerState.snapshot()`` dicts
  written by the tick thread (see ``node.py``), never a fork of a threaded process.
- ``dynamicMembershipChange`` on (``cluster add-node|remove-node``), ``commandsWaitLeader`` on
  (a command proposed during an election waits for the leader instead of failing at once).

- ``durable_journal`` on (``[cluster] durable_journal``): the journal and term/vote are
  fsynced before the node acknowledges an entry or a vote, and a leader counts itself towards
  a commit only for what is on its disk (``raftsched.raft.journal``, ``journal_sync``).
- Log compaction after ``[cluster] compaction_min_entries`` (5,000) entries or
  ``compaction_min_seconds`` (300 s), pysyncobj's defaults, now in config; each node's first
  compaction is later by its ``compaction_offset`` (rank / members) so nodes never compact in
  lockstep.
- ``handover_timeout`` 3 s (``[cluster] handover_timeout``): how long a leader stopped by
  SIGTERM waits for the follower it handed leadership to (``RaftNode.hand_over``).

Files live under ``<data_dir>/<host>_<port>/``: ``raft.journal`` (+ ``.meta``) and
``raft.dump``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObjConf

from raftsched.addresses import admin_bind_for, is_loopback
from raftsched.errors import ConfigError

JOURNAL_FILE = "raft.journal"
DUMP_FILE = "raft.dump"


@dataclass(frozen=True)
class RaftSettings:
    """Everything one node needs to join its cluster. ``repr`` never shows the secret."""

    self_address: str
    nodes: tuple[str, ...]  # every member, this node included
    secret: str
    data_dir: Path  # the cluster's data dir; this node's files go in node_dir
    raft_min_timeout: float = 0.15
    raft_max_timeout: float = 0.45
    append_entries_period: float = 0.03
    connection_timeout: float = 1.0
    connection_retry_time: float = 1.0
    leader_fallback_timeout: float = 1.5
    commit_timeout: float = 5.0
    admin_bind: str = ""
    append_entries_use_batch: bool = False
    log_compaction_min_entries: int = 5000  # [cluster] compaction_min_entries
    log_compaction_min_time: float = 300.0  # [cluster] compaction_min_seconds
    durable_journal: bool = True
    handover_timeout: float = 3.0  # [cluster] handover_timeout; 0: a leader stops at once

    def __repr__(self) -> str:
        return (
            f"RaftSettings(self_address={self.self_address!r}, nodes={self.nodes!r},"
            f" secret={'***' if self.secret else ''!r}, data_dir={str(self.data_dir)!r})"
        )

    @property
    def partners(self) -> tuple[str, ...]:
        return tuple(node for node in self.nodes if node != self.self_address)

    @property
    def node_dir(self) -> Path:
        return node_dir(self.data_dir, self.self_address)

    @property
    def journal_file(self) -> Path:
        return self.node_dir / JOURNAL_FILE

    @property
    def dump_file(self) -> Path:
        return self.node_dir / DUMP_FILE

    @property
    def admin_address(self) -> str:
        return admin_bind_for(self.self_address, self.admin_bind)

    @property
    def compaction_offset(self) -> float:
        return compaction_offset(self.self_address, self.nodes)

    @property
    def first_compaction(self) -> tuple[int, float]:
        """(entries, seconds) thresholds of this node's first log compaction: the configured
        ones raised by ``compaction_offset`` of themselves (see :func:`compaction_offset`)."""
        offset = self.compaction_offset
        entries = self.log_compaction_min_entries
        return entries + int(entries * offset), self.log_compaction_min_time * (1 + offset)

    def validate(self) -> None:
        """Raise ConfigError naming the key and value that cannot work."""
        for node in self.nodes:
            split_address(node, key="nodes")
        split_address(self.self_address, key="self_address")
        if len(set(self.nodes)) != len(self.nodes):
            raise _error("nodes", ",".join(self.nodes), "lists a node twice")
        if self.self_address not in self.nodes:
            raise _error(
                "self_address",
                self.self_address,
                f"is not one of [cluster] nodes ({', '.join(self.nodes)}); pass --address"
                " host:port with one of them, or set RAFTSCHED__CLUSTER__SELF_ADDRESS",
            )
        if not self.secret and not all(is_loopback(node) for node in self.nodes):
            raise _error(
                "secret",
                "",
                "is empty while some nodes are not on loopback: set a long random secret,"
                " the same on every node (it encrypts and authenticates Raft traffic)",
            )
        if self.commit_timeout <= 0:
            raise _error("commit_timeout", str(self.commit_timeout), "must be > 0")
        if self.log_compaction_min_entries < 2:  # pysyncobj asserts it
            raise _error(
                "compaction_min_entries", str(self.log_compaction_min_entries), "must be >= 2"
            )
        if self.log_compaction_min_time <= 0:
            raise _error("compaction_min_seconds", str(self.log_compaction_min_time), "must be > 0")
        if self.handover_timeout < 0:
            raise _error("handover_timeout", str(self.handover_timeout), "must be >= 0")
        try:
            build_conf(self).validate()
        except AssertionError:
            raise _error(
                "raft_min_timeout",
                f"{self.raft_min_timeout}",
                "and the other timings must satisfy: raft_min_timeout > 3 *"
                " append_entries_period, raft_max_timeout > raft_min_timeout,"
                " connection_timeout >= raft_max_timeout, leader_fallback_timeout >"
                f" append_entries_period (got append_entries_period={self.append_entries_period},"
                f" raft_max_timeout={self.raft_max_timeout},"
                f" connection_timeout={self.connection_timeout},"
                f" leader_fallback_timeout={self.leader_fallback_timeout})",
            ) from None


def settings_from_config(config: Any, *, self_address: str | None = None) -> RaftSettings:
    """RaftSettings from a ``raftsched.config.Config``; ``self_address`` (``--address``) wins
    over ``[cluster] self_address``. Validated."""
    cluster = config.cluster
    address = self_address or cluster.self_address
    if not address:
        raise _error(
            "self_address",
            "",
            "is empty: pass --address host:port (one of [cluster] nodes) or set"
            " RAFTSCHED__CLUSTER__SELF_ADDRESS",
        )
    settings = RaftSettings(
        self_address=address,
        nodes=tuple(cluster.nodes),
        secret=cluster.secret,
        data_dir=Path(cluster.data_dir),
        raft_min_timeout=cluster.raft_min_timeout,
        raft_max_timeout=cluster.raft_max_timeout,
        append_entries_period=cluster.append_entries_period,
        connection_timeout=cluster.connection_timeout,
        connection_retry_time=cluster.connection_retry_time,
        leader_fallback_timeout=cluster.leader_fallback_timeout,
        commit_timeout=cluster.commit_timeout,
        admin_bind=cluster.admin_bind,
        durable_journal=getattr(cluster, "durable_journal", True),
        log_compaction_min_entries=getattr(cluster, "compaction_min_entries", 5000),
        log_compaction_min_time=getattr(cluster, "compaction_min_seconds", 300.0),
        handover_timeout=getattr(cluster, "handover_timeout", 3.0),
    )
    settings.validate()
    return settings


def build_conf(
    settings: RaftSettings,
    *,
    serializer: Callable[[str, Any], None] | None = None,
    deserializer: Callable[[str], Any] | None = None,
    on_state_changed: Callable[[int, int], None] | None = None,
) -> SyncObjConf:
    """The SyncObjConf for ``settings`` (not validated here: ``SyncObj`` validates it).

    Log compaction starts at this node's ``first_compaction`` thresholds; the first call of
    ``serializer`` (the first compaction) sets the configured ones, so the node stays
    ``compaction_offset`` of a period apart from the others from then on."""
    first_entries, first_seconds = settings.first_compaction
    conf = SyncObjConf(
        bindAddress=settings.self_address,
        password=settings.secret or None,
        journalFile=str(settings.journal_file),
        fullDumpFile=str(settings.dump_file),
        raftMinTimeout=settings.raft_min_timeout,
        raftMaxTimeout=settings.raft_max_timeout,
        appendEntriesPeriod=settings.append_entries_period,
        connectionTimeout=settings.connection_timeout,
        connectionRetryTime=settings.connection_retry_time,
        leaderFallbackTimeout=settings.leader_fallback_timeout,
        appendEntriesUseBatch=settings.append_entries_use_batch,
        commandsWaitLeader=True,
        dynamicMembershipChange=True,
        useFork=False,
        serializer=serializer,
        deserializer=deserializer,
        onStateChanged=on_state_changed,
        logCompactionMinEntries=first_entries,
        logCompactionMinTime=first_seconds,
        bindRetryTime=0.5,
    )
    if serializer is not None:
        conf.serializer = _then_configured_thresholds(serializer, conf, settings)
    return conf


def compaction_offset(self_address: str, nodes: Sequence[str]) -> float:
    """This node's share of a compaction period, in [0, 1): its rank among the sorted members
    divided by their number (0, 1/3 and 2/3 for three nodes).

    pysyncobj compacts when the log holds ``logCompactionMinEntries`` entries or
    ``logCompactionMinTime`` seconds passed since the last compaction. Nodes that start
    together and apply the same entries reach both at the same moment, and a compaction holds
    the tick thread (we measured all three nodes blocked within 0.3 s of each other, and
    an election each time). Every node reads the same ``[cluster] nodes``, so ranks differ
    without any coordination, unlike a hash of the address, which may put two nodes close
    together. The offset delays only the first compaction; later ones follow the configured
    thresholds, which keeps the phase."""
    members = sorted({*nodes, self_address})
    return members.index(self_address) / len(members)


def _then_configured_thresholds(
    serializer: Callable[[str, Any], None], conf: SyncObjConf, settings: RaftSettings
) -> Callable[[str, Any], None]:
    def serialize(filename: str, data: Any) -> None:
        serializer(filename, data)  # may refuse (raise): then the offset holds until it starts
        # pysyncobj reads the thresholds from conf at every check (tick thread, as this call)
        conf.logCompactionMinEntries = settings.log_compaction_min_entries
        conf.logCompactionMinTime = settings.log_compaction_min_time

    return serialize


def node_dir(data_dir: Path, address: str) -> Path:
    host, port = split_address(address, key="self_address")
    safe_host = re.sub(r"[^A-Za-z0-9.-]", "_", host)
    return Path(data_dir) / f"{safe_host}_{port}"


def split_address(address: str, *, key: str) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _error(key, address, "must be host:port with a port in 1..65535")
    return host.strip("[]"), int(port_text)


def _error(key: str, value: str, problem: str) -> ConfigError:
    shown = "***" if key == "secret" and value else value
    return ConfigError(
        f"[cluster] {key} = {shown!r} {problem}", source="cluster", key=key, value=shown
    )
