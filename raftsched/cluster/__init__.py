"""raftsched.cluster."""
