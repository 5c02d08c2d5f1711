"""modelops.drift: the nightly drift job (two-sample KS per feature and for the score).

- :mod:`modelops.drift.stats`: pure numpy maths (exact KS statistic, p-values, moments,
  verdict, root-cause ranking);
- :mod:`modelops.drift.exact`: the job's Python-worker functions (column reads, column blocks,
  per-column statistics);
- :mod:`modelops.drift.job`: the Spark job and :func:`~modelops.drift.job.run_drift`, the
  entry point of the ``nightly_drift`` DAG;
- :mod:`modelops.drift.report`: ``drift.json`` and the self-contained HTML report;
- :mod:`modelops.drift.commands`: ``modelops drift``.
"""
