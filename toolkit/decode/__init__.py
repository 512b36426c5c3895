"""Engines inside a model's decoding loop: the models (HF, random weights, the simulated
device) and the loop that measures constrained decoding end to end.
"""
