"""``airflow.providers.common.sql``: ``sensors.sql.SqlSensor``."""
