"""The reference recommender: synthetic data, feature tables, training, ONNX export, MLflow logging."""
