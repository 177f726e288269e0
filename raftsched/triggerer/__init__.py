"""The triggerer process (`raftsched triggerer`): leases the triggers of deferred tasks from
the cluster and runs them in one asyncio loop; a firing is reported as a committed event
(docs/architecture.md §17). Like a worker, it reaches the cluster only through
``api.client`` and holds no state that matters.

- ``loop``              lease triggers, run them, renew their leases, report firings
- ``triggers``          the triggers by kind: each a coroutine that returns the event
- ``cluster_triggers``  triggers that need the cluster's help, under their own lease
- ``transport``         WorkerService's trigger calls over gRPC
"""
