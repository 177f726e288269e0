"""``airflow.providers.standard.operators``: the operators of ``raftsched.airflow.operators``."""
