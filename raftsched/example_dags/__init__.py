"""Example DAGs shipped with raftsched (`raftsched standalone` can load them).

This file starts with an underscore, so the DAG parser skips it.
"""
