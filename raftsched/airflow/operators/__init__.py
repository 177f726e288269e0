"""``airflow.operators``: ``bash``, ``python``, ``empty`` (``dummy``), ``trigger_dagrun``."""
