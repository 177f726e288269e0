"""The partition-testing kit: nodes in network namespaces, faults, a checker of DESIGN.md §4."""
