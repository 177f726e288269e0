"""``airflow.providers``: only ``standard`` (Airflow 3's home of the core operators)."""
