"""Experiments: evaluation of trained models (and, later, compare and sweep)."""
