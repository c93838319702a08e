"""Scaling: the decision function and the worker pools it drives."""
