"""modelops.feedback."""
