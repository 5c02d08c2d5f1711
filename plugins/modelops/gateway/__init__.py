"""modelops.gateway."""
