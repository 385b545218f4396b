"""What a machine is: the profile schema, profile files (load, overrides, checks) and the twin import."""
