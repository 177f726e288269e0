"""The partition-testing kit: nodes in namespaces, faults, a checker of docs/architecture.md §4."""
