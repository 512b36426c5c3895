"""MaskBench-style benchmark runs: datasets, the worker pool and its records, measurements,
agreement between engines, schema coverage.
"""
