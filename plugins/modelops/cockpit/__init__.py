"""The release cockpit: pages of the modelops Airflow plugin (Releases, release detail, lineage).

``record`` holds the documents the release writes for the cockpit (pure), ``views`` builds
the pages' view models from them (pure), ``svg`` draws the charts (pure), ``store`` reads
the object store and MLflow, ``app`` is the thin FastAPI app the plugin mounts.
"""
