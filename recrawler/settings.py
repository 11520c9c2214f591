"""Project settings for ``scrapy crawl docs``: the add-on does the rest (it also reads
``RECRAWLER_DB_URI``, ``RECRAWLER_EVENTS_URI`` and ``RECRAWLER_WEBHOOK_URL``/``_SECRET`` from the
environment, for any project)."""

from __future__ import annotations

import os

BOT_NAME = "recrawler"
SPIDER_MODULES = ["recrawler.spiders"]
NEWSPIDER_MODULE = "recrawler.spiders"
# `scrapy crawl` with exit codes that say how the run ended (see recrawler.commands.crawl)
COMMANDS_MODULE = "recrawler.commands"
ADDONS = {"recrawler.addon.RecrawlerAddon": 0}
USER_AGENT = "recrawler (+https://github.com/recrawler/recrawler)"
LOG_LEVEL = os.environ.get("RECRAWLER_LOG_LEVEL", "INFO")
TELNETCONSOLE_ENABLED = False
