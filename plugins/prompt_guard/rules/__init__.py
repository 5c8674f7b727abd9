"""The shipped default rule pack (`default.yaml`); data only, no code."""
