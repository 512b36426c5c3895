"""Regexes and byte-level DFAs: the regex parser, UTF-8 ranges, subset construction and
minimization (in C), boolean operations on DFAs, and the DFAs of JSON text.
"""
