"""Scheduled batch jobs around Spark: stage inputs from the object store, submit, publish results."""
