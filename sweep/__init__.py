"""Sweep engine: YAML search spaces -> Ray Tune trials -> MLflow runs."""
