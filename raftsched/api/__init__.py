"""raftsched.api."""
