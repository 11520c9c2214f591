"""Project settings for ``scrapy crawl docs``: the add-on does the rest.

The only environment reads of the project live here.
"""

from __future__ import annotations

import os

BOT_NAME = "recrawler"
SPIDER_MODULES = ["recrawler.spiders"]
NEWSPIDER_MODULE = "recrawler.spiders"
ADDONS = {"recrawler.addon.RecrawlerAddon": 0}
USER_AGENT = "recrawler (+https://github.com/recrawler/recrawler)"
LOG_LEVEL = os.environ.get("RECRAWLER_LOG_LEVEL", "INFO")
TELNETCONSOLE_ENABLED = False

if os.environ.get("RECRAWLER_DB_URI"):
    RECRAWLER_DB_URI = os.environ["RECRAWLER_DB_URI"]
if os.environ.get("RECRAWLER_EVENTS_URI"):
    RECRAWLER_EVENTS_URI = os.environ["RECRAWLER_EVENTS_URI"]
