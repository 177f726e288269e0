"""``airflow.triggers`` (Airflow 2): the triggers raftsched runs (``file``)."""
