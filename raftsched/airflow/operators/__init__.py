"""``airflow.operators``: ``bash``, ``python``, ``empty``, ``trigger_dagrun``."""
