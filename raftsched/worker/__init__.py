"""raftsched.worker."""
