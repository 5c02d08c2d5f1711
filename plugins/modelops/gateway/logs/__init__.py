"""What the gateway writes down: the spooled prediction and scored-sample logs, their upload, the access log."""
