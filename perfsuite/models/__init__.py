"""Benchmark models: the registry and the per-framework model zoos."""
