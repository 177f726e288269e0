"""raftsched.cluster: the scheduler's use of a Raft node (``raftsched.raft``): the replicated
state on a node, the leader loop, the materializer and the read views; not Raft itself.

- ``runtime``       one scheduler node process, wired (Raft node, loops, heartbeats, admin)
- ``node``          ``SchedulerNode``: one ``SchedulerState`` replicated by the Raft node it holds
- ``proposer``      proposing commands: request ids, timeouts, retries, pipelines
- ``leader``, ``leader_tick``, ``leader_commands``, ``leader_walks``, ``leading``, ``parsing``:
  the leader loop (time and DAG files -> committed decisions) and its DAG parse thread
- ``materializer_driver``  committed outbox entries -> metadata DB -> AckMaterialized
- ``read_view``, ``state_copy``  immutable copies of the state at one applied index, for readers
- ``versions``      rolling upgrades: the proposal gate and finalization (§12)
- ``workers_seen``  which workers are live and which queues they serve
- ``heartbeat``     the node's heartbeat row in the metadata DB
- ``admin``, ``metrics``, ``instruments``, ``dag_metrics``, ``tick_watch``: the admin
  endpoint (``/status``, ``/metrics``) and what it reports
- ``replay``        a node's data dir replayed offline in the pure core
"""
