"""``python -m recrawler.cli``."""

from __future__ import annotations

import sys

from recrawler.cli import main

sys.exit(main())
