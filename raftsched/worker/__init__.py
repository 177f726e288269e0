"""raftsched.worker: lease tasks from the cluster, run them, report (``raftsched worker``).

transport.py       the WorkerTransport Protocol and Assignment (what a lease carries)
grpc_transport.py  WorkerTransport over WorkerService (api.client.RaftschedClient)
loop.py            Worker: the lease / heartbeat / complete loop, graceful stop, noop mode
runner.py          Attempt: one attempt in its own process group; timeout; kill
_guard.py          the attempt's parent process: kills the attempt when the worker dies
_run_python.py     the child process of a PythonTask: import the DAG file, call the function
logs.py            LogBuffer (bounded, drop-oldest) and LogShipper (chunks to AppendLogs)
"""
