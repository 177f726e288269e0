"""``airflow.providers.http``: ``sensors.http.HttpSensor``."""
