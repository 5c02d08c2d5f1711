"""The application spark-submit runs: the ``modelops`` command line (``feedback``, ``drift`` …).

Airflow's SparkSubmitOperator submits this file with the job's arguments and a master URL,
so the same job runs on ``local[2]`` or on a cluster.
"""

from __future__ import annotations

import sys

from modelops.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
