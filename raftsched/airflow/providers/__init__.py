"""``airflow.providers``: ``standard`` (Airflow 3's home of the core operators and sensors),
``common.sql`` (SqlSensor) and ``http`` (HttpSensor)."""
