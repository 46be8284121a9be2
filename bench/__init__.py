"""Benchmarks (run by hand, never by the test suite): ``python -m bench.codec``, ``python -m bench.client``."""
