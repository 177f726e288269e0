"""raftsched.cli."""
