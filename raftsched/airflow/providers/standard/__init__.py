"""``airflow.providers.standard``: ``operators.bash|python|empty|trigger_dagrun``, ``sensors``."""
