"""The release cockpit: pages of the modelops Airflow plugin (Releases, release detail, lineage).

The release records it shows are the canary's (:mod:`modelops.canary.record`, written through
:mod:`modelops.canary.record_store`); ``views`` builds the pages' view models from them (pure),
``svg`` draws the charts (pure), ``store`` reads the object store and MLflow, ``app`` is the thin
FastAPI app the plugin mounts.
"""
