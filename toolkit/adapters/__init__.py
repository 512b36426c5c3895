"""Adapters into the libraries researchers decode with (:mod:`toolkit.adapters.transformers`)."""
