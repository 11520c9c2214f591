"""Entry point: ``python -m tests.mockserver ROOT``."""

from tests.mockserver import main

main()
