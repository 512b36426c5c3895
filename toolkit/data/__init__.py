"""What the benchmark and the decoding harness share, below the engines: the dataset
items and their selection (:mod:`~toolkit.data.datasets`), the checks of an output
against its item (:mod:`~toolkit.data.checks`), and what a run records of its machine,
engines and libraries (:mod:`~toolkit.data.provenance`).
"""
