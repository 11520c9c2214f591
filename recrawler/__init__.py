"""recrawler: recrawl a docs site and re-index only what moved."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
