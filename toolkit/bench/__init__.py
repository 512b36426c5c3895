"""MaskBench-style benchmark runs: the run, one item's measurement, the worker pool and its
records, agreement between engines, the soundness audit, schema coverage (the datasets
are a floor below the engines: :mod:`toolkit.data`).
"""
