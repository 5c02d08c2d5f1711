"""modelops.canary."""
