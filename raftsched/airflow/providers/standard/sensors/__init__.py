"""``airflow.providers.standard.sensors``: ``filesystem.FileSensor``,
``date_time.DateTimeSensor(Async)`` and ``time_delta.TimeDeltaSensor(Async)`` run through
deferral and the triggerer (``raftsched.airflow._sensors``), and
``external_task.ExternalTaskSensor`` always on the triggerer; the other submodules
(``bash``, ``python``, ``time``) import, and their sensors raise an error saying what to use
instead.
"""
