"""``airflow.sensors``: FileSensor (``filesystem``), DateTimeSensor(Async) (``date_time``),
TimeDeltaSensor(Async) (``time_delta``), SqlSensor (``sql``), ExternalTaskSensor
(``external_task``) and ``base.BaseSensorOperator``, run through deferral and the triggerer
(raftsched.airflow._sensors)."""
