"""modelops: an Airflow-orchestrated MLOps platform (MLflow, Great Expectations, Triton, Spark)."""

from __future__ import annotations

__version__ = "0.1.0"
