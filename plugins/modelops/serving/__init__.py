"""modelops.serving."""
