"""raftsched.worker: lease tasks from the cluster, run them, report (``raftsched worker``).

transport.py       the WorkerTransport Protocol and Assignment (what a lease carries)
grpc_transport.py  WorkerTransport over WorkerService (api.client.RaftschedClient); defer_call.py
                   its Defer call
loop.py            Worker: the lease / heartbeat / complete loop, graceful stop, noop mode (a
                   supported benchmark mode, README "Benchmarks")
heartbeats.py      heartbeats and self-fencing of the worker's attempts
reports.py         outcomes that end together sent in one call; next_leases.py what it leases
sign_off.py        what a worker tells the cluster about itself (the workers page)
death_report.py    the worker's side of its death report; _last_words.py the report itself
runner.py          Attempt: one attempt, its output, timeout and kill; attempt_process.py its
                   process (guarded on Linux)
executor.py        the worker's side of the supervisor: start it, fork servers, spawn requests
supervisor.py      the long-lived process that forks every attempt; Python fork servers
                   (forkserver.py), their loop (supervisor_server.py), wire (supervisor_wire.py)
                   and the worker's end of their sockets (channel.py)
_guard.py          each attempt's session leader: kills the attempt when the worker dies
_run_python.py     a PythonTask's code: import the DAG file (cold) or not (warm), call the function
_run_callback.py   a callback job's process; callback_runner.py leases and runs callback jobs
results.py         an attempt's XCom: its arguments in, its result file out
task_secrets.py    the variables and connections an attempt declared, fetched before it starts
secret_channel.py  an attempt's on-demand secret reads; on_demand.py wires it to the transport
task_user.py       the user task code runs as ([worker] run_as_user)
logs.py            LogBuffer (bounded, drop-oldest) and LogShipper (chunks to AppendLogs)
metrics.py         the worker's own GET /metrics
"""
