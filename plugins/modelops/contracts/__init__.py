"""modelops.contracts."""
