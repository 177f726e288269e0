"""raftsched.dags."""
