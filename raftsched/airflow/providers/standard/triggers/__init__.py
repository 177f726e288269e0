"""``airflow.providers.standard.triggers``: the triggers raftsched runs (``file``)."""
