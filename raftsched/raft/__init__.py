"""The Raft layer: the one package that knows pysyncobj (0.3.17, pinned), and what we patch of it.

Nothing outside ``raftsched.raft`` imports pysyncobj or reads its internals
(``tests/unit/test_layering.py`` checks it). ``raftsched.cluster`` is the scheduler's use of a
Raft node (state machine, leader loop, materializer, read views), not its implementation.

Contract of :class:`~raftsched.raft.node.RaftNode` (what the rest of raftsched may rely on):

- **Propose.** ``propose(command, callback)`` appends ``command`` as one log entry (on a
  follower, pysyncobj forwards it to the leader). ``callback(result, reason)`` runs once on
  the tick thread: ``reason`` is a :class:`~raftsched.raft.outcomes.FailReason`; on
  ``SUCCESS`` ``result`` is what the state machine's ``apply_entry`` returned for that entry.
  Every other reason but ``REQUEST_DENIED`` means "unknown": the entry may have been applied
  all the same (pysyncobj reports ``LEADER_CHANGED``, ``DISCARDED``, ``UNKNOWN_OUTCOME`` for
  entries that did commit). A callback can be lost (entries covered by an installed snapshot
  never fire theirs): callers wait with a timeout, treat a timeout as "unknown" and retry
  with the same request id; the state machine answers a repeated id with the first result
  (``raftsched.cluster.proposer`` does this). ``REQUEST_DENIED`` means the entry was not
  appended (the node's ``command_gate`` refused it, here or on the leader it was forwarded to).
- **Apply.** Committed entries are applied in log order, once per node and per start (a
  restart replays the log after the last snapshot), on the tick thread, with their log index
  (the fencing token of leases). Apply must be deterministic, fast and free of I/O; it must not
  raise.
- **Roles.** ``role`` ("follower", "candidate", "leader"), ``term``, ``leader_address``,
  ``quorum``, ``commit_index``, ``last_applied`` may be read from any thread. Role listeners
  (``add_role_listener``) run on the tick thread on every change; ``wait_role_change`` blocks
  another thread until one. Leadership alone proves nothing: two nodes may both believe they
  lead for up to ``leader_fallback_timeout``; act only on committed results.
- **Membership and leadership.** One membership change at a time
  (:mod:`~raftsched.raft.membership`); ``hand_over(timeout)`` transfers leadership to the most
  up-to-date connected follower (:mod:`~raftsched.raft.handover`);
  :mod:`~raftsched.raft.admin_messages` asks any node's Raft port for a transfer.
- **Snapshots.** The node asks its state machine for ``snapshot_subject()`` (state and lock)
  and writes ``state.snapshot()`` from a forked child (:mod:`~raftsched.raft.snapshots`); on
  load it calls ``restore_state(data)``. A snapshot that cannot be read sets ``fatal_error``.
- **Durability.** Entries, term and vote are on disk (fsynced) before this node acknowledges
  or votes for them (:mod:`~raftsched.raft.journal`, :mod:`~raftsched.raft.group_commit`);
  the leader counts itself towards a commit only for entries on its own disk.
- **Threads.** pysyncobj runs one tick thread per node: apply, callbacks, role listeners, tick
  callbacks and snapshot hooks run there and must only enqueue or set events. ``close()``
  stops it.

Each patch of pysyncobj lives in this package, next to a comment naming the upstream
behaviour it corrects, and has a test that fails without it: the transport
(:mod:`~raftsched.raft.transport`: commit index bounded by what the leader vouched for, held
acknowledgements, keep-alives, release reports), append-entries rewriting
(:mod:`~raftsched.raft.append_entries`: no truncation without a conflict, refusals that never
undo a step back, chunk reassembly), the journal (:mod:`~raftsched.raft.journal`,
:mod:`~raftsched.raft.journal_sync`), the group commit and tick pacing
(:mod:`~raftsched.raft.group_commit`), the restart hold and handover
(:mod:`~raftsched.raft.handover`), the forwarded-command gate (:mod:`~raftsched.raft.node`).
:mod:`~raftsched.raft.compat` checks at start that every internal they touch is still there.
"""
