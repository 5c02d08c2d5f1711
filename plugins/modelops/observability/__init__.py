"""Observability as code: metrics the batch jobs and releases push, Prometheus configuration."""
