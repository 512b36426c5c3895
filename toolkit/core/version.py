"""masklab's version, as records and reports name it."""

from __future__ import annotations

from importlib import metadata

__all__ = ["masklab_version"]


def masklab_version() -> str:
    """The installed distribution's version; ``"dev"`` in a checkout that is not installed."""
    try:
        return metadata.version("masklab")
    except metadata.PackageNotFoundError:
        return "dev"
