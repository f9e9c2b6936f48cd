"""Evaluation: pass@k and evaluation suites."""
