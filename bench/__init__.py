"""Benchmarks: verification accuracy on labelled sets, search speed, indexing speed, and their reports."""
