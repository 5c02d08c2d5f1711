"""modelops.stack."""
