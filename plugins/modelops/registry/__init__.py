"""modelops.registry."""
