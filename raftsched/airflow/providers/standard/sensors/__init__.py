"""``airflow.providers.standard.sensors``: no sensor is supported yet.

Each submodule (``bash``, ``python``, ``time``, ``time_delta``, ``date_time``, ``filesystem``,
``external_task``) imports, and its sensors raise an error saying what to use instead: a task
that checks once and fails, with ``retries`` and ``retry_delay`` to poll.
"""
