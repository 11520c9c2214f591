"""Adapters for the frameworks bots are built with (each behind its own extra)."""
