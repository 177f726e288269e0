"""Process supervision for ``raftsched standalone``: the child processes of a one-machine
cluster (scheduler nodes, a worker, a web farm behind nginx), restarted when they die.

Not Raft: ``raftsched.cluster`` is the Raft node and the leader loop; this package starts and
watches processes, whichever they are.

- ``supervisor``  run a fixed set of child processes, restart the ones that die, stop them all
- ``webfarm``     N webservers on loopback behind a local nginx (``nginx``: the binary, its
  config)
- ``examples``    the connection the example DAGs read, added once a new cluster answers
"""
