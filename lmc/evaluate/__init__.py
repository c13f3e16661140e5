"""Scoring a trained net: accuracy and task metrics, checkpoints scored, samples, plots."""
