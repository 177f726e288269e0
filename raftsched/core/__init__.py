"""raftsched.core."""
