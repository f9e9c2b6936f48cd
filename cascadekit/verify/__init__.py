"""Verifiers: pure functions from text to a verdict with a reason, never raising on malformed text."""
