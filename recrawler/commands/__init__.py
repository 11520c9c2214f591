"""Scrapy commands of the recrawler project (``COMMANDS_MODULE = "recrawler.commands"``)."""
