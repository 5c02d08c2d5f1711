"""modelops.notify."""
