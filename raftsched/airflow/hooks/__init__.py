"""``airflow.hooks``: ``base.BaseHook.get_connection`` for the connections a task declares."""
