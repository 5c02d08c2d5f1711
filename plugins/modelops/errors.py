"""The package's exception hierarchy; adapters translate third-party errors into these."""

from __future__ import annotations


class ModelopsError(Exception):
    """Base of every error the platform raises on purpose."""


class ConfigError(ModelopsError):
    """A configuration variable has a bad value."""


class StackError(ModelopsError):
    """The embedded stack could not be started, checked or stopped."""


class RegistryError(ModelopsError):
    """The model registry (MLflow) refused or failed an operation."""


class ObjectStoreError(ModelopsError):
    """The object store (S3) refused or failed an operation."""


class ServingError(ModelopsError):
    """Triton refused or failed an operation."""


class ContractError(ModelopsError):
    """Data broke a contract (JSON Schema or Great Expectations suite)."""


class GateFailed(ModelopsError):
    """A release gate failed: not transient, must not be retried."""
