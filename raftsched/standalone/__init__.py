"""Process supervision for ``raftsched standalone``: the child processes of a one-machine
cluster (scheduler nodes, a worker, a web farm behind nginx), restarted when they die.

Not Raft: ``raftsched.cluster`` is the Raft node and the leader loop; this package starts and
watches processes, whichever they are.
"""
