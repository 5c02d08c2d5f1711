"""The modelops Airflow plugin: small on purpose (the package is imported normally)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class ModelopsPlugin(AirflowPlugin):
    name = "modelops"
