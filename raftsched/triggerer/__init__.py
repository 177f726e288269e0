"""The triggerer process (`raftsched triggerer`): leases the triggers of deferred tasks from
the cluster and runs them in one asyncio loop; a firing is reported as a committed event
(docs/architecture.md §17). Like a worker, it reaches the cluster only through
``api.client`` and holds no state that matters."""
