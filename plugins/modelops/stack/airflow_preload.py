"""Run an Airflow command after importing, once, the libraries every task of ours imports.

``python -m modelops.stack.airflow_preload scheduler --skip-serve-logs`` is ``airflow scheduler
--skip-serve-logs`` with :data:`TASK_IMPORTS` already in memory. Airflow 3 runs a task in a bare
``os.fork()`` of its executor's process (LocalExecutor: a worker forked from the scheduler; Celery:
the worker's pool process; ``airflow.sdk.execution_time.supervisor``), so a task starts with whatever
that parent imported and pays for the rest itself. Measured on the 2-core CI machine: importing
great_expectations takes 4.5 s and mlflow 1.8 s on an idle machine; in the CI run of 585dbac the
contract gate took 14.7 s on average over 37 releases and resolve_candidate, which only asks MLflow
for a version, 3.6 s. With the imports done in the parent, each task skips them.

Only libraries and modules of our own that import no Airflow are listed: Airflow initialises itself
when the command starts, as it does for ``airflow`` itself. A module that fails to import is
reported on stderr and skipped; the task that needs it imports it itself and fails there, with its
own error, as it would without the preload.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence

#: What the release, feedback, drift and precompute tasks import (third-party first, then ours).
TASK_IMPORTS: tuple[str, ...] = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "great_expectations",
    "mlflow",
    "mlflow.pyfunc",
    "mlflow.models",
    "onnx",
    "onnxruntime",
    "sklearn.pipeline",
    "skl2onnx",
    "botocore.exceptions",
    "boto3",
    "apprise",
    "pyspark.sql",
    "modelops.contracts.validation",
    "modelops.contracts.report",
    "modelops.contracts.suites",
    "modelops.registry.mlflow_registry",
    "modelops.release.steps",
    "modelops.release.spec_release",
    "modelops.serving.spec_publish",
    "modelops.objectstore",
    "modelops.notify",
    "modelops.jobs.feedback_tasks",
    "modelops.jobs.drift_tasks",
    "modelops.jobs.precompute_tasks",
    "modelops.release.autostart",
)


def preload(names: Sequence[str] = TASK_IMPORTS) -> list[str]:
    """Import ``names``; return those that failed (each reported on stderr, never raised)."""
    failed: list[str] = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the task that needs it raises its own error
            failed.append(name)
            print(f"modelops preload: {name} not imported ({type(exc).__name__}: {exc})", file=sys.stderr)
    return failed


def main(argv: Sequence[str] | None = None) -> None:
    """``airflow <argv>`` after :func:`preload`."""
    args = list(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    failed = preload()
    print(f"modelops preload: {len(TASK_IMPORTS) - len(failed)} of {len(TASK_IMPORTS)} task imports "
          f"done in {time.monotonic() - started:.1f} s before `airflow {' '.join(args)}`", file=sys.stderr)
    from airflow.__main__ import main as airflow_main

    sys.argv = ["airflow", *args]
    airflow_main()  # type: ignore[no-untyped-call]  # Airflow's CLI entry point has no annotations


if __name__ == "__main__":
    main()
