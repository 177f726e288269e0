"""raftsched.worker: lease tasks from the cluster, run them, report (``raftsched worker``).

transport.py       the WorkerTransport Protocol and Assignment (what a lease carries)
grpc_transport.py  WorkerTransport over WorkerService (api.client.RaftschedClient)
loop.py            Worker: the lease / heartbeat / complete loop, graceful stop, noop mode
runner.py          Attempt: one attempt, its output, timeout and kill
executor.py        the worker's side of the supervisor: start it, fork servers, spawn requests
supervisor.py      the long-lived process that forks every attempt; Python fork servers
_guard.py          each attempt's session leader: kills the attempt when the worker dies
_run_python.py     a PythonTask's code: import the DAG file (cold) or not (warm), call the function
logs.py            LogBuffer (bounded, drop-oldest) and LogShipper (chunks to AppendLogs)
"""
