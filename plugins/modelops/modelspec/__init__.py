"""modelops.modelspec: the spec of a served model (``ModelSpec``), derived from an MLflow model, and the
pure renderers that turn it into the platform's artefacts (edge contract, ``config.pbtxt``, drift list,
contract-gate expectations)."""
