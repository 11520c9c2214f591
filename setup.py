"""Lets ``scrapyd-deploy`` build the egg from ``pyproject.toml`` instead of writing its own setup.py."""

from setuptools import setup

setup()
