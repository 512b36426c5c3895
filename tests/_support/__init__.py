"""Test helpers outside the public API: small vocabularies and grammar texts."""
