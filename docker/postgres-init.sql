-- The MLflow backend store lives beside Airflow's metadata database.
CREATE DATABASE mlflow OWNER modelops;
