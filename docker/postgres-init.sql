-- The MLflow backend store and MLflow's basic-auth user store live beside Airflow's metadata database.
CREATE DATABASE mlflow OWNER modelops;
CREATE DATABASE mlflow_auth OWNER modelops;
