"""raftsched.store."""
