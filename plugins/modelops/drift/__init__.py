"""modelops.drift."""
