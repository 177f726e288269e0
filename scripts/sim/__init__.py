"""A deterministic simulator: N SchedulerNodes on an in-memory network under virtual time,
seeded faults, a scheduling workload and the §4 invariants (``scripts/sim/run.py``)."""
