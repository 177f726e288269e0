"""``airflow.utils``: ``task_group``, ``trigger_rule``, ``edgemodifier``, ``state``."""
