"""RecrawlerAddon: installs recrawler's defaults and places its components."""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import json
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import NotConfigured
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from recrawler import default_settings
from recrawler.auditor import Auditor
from recrawler.downloadermiddlewares.audit import AuditMiddleware
from recrawler.downloadermiddlewares.compression import BoundedHttpCompressionMiddleware
from recrawler.downloadermiddlewares.conditional import ConditionalRequestMiddleware
from recrawler.downloadermiddlewares.credentials import CredentialsMiddleware
from recrawler.downloadermiddlewares.listing import ListingBodyMiddleware
from recrawler.downloadermiddlewares.redirect import PageRedirectMiddleware
from recrawler.downloadermiddlewares.render import GUARDED_SETTINGS, RenderMiddleware, render_settings
from recrawler.downloadermiddlewares.retry import PoliteRetryMiddleware
from recrawler.downloadermiddlewares.robotstxt import CountedRobotsTxtMiddleware
from recrawler.downloadermiddlewares.urlpolicy import UrlPolicyMiddleware
from recrawler.exceptions import ConfigurationError
from recrawler.extensions.logs import DownloadFailureLog
from recrawler.extensions.reconcile import Reconciler
from recrawler.extensions.sinks import VectorStoreSinks
from recrawler.extras import quiet_library_deprecations, require
from recrawler.facets import FacetPattern
from recrawler.intervals import SchedulePolicy
from recrawler.kb.embedders import RunEmbedder
from recrawler.learning import NoiseRegistry
from recrawler.meta import spider_opted_in
from recrawler.pipelines.classify import ClassifyPipeline
from recrawler.pipelines.index import IndexPipeline
from recrawler.project import (
    ENVIRONMENT_SETTINGS,
    OTHER_ENVIRONMENT,
    apply_environment,
    project_db_uri,
    resolve_project_db,
    unknown_environment,
)
from recrawler.queues import REDIS_QUEUE
from recrawler.runtime import Runtime
from recrawler.spidermiddlewares.deltafetch import DeltaFetchMiddleware
from recrawler.spidermiddlewares.links import LinkListingMiddleware
from recrawler.spidermiddlewares.listing import ListingMiddleware
from recrawler.spidermiddlewares.recheck import RecheckMiddleware
from recrawler.spidermiddlewares.schedule import ScheduleMiddleware
from recrawler.spidermiddlewares.softnotfound import SoftNotFoundMiddleware
from recrawler.spidermiddlewares.workers import WorkerStartMiddleware

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: Scrapy settings for a team crawling its own docs site: fast, bounded, robots.txt obeyed.
FAST_PROFILE: dict[str, Any] = {
    "ROBOTSTXT_OBEY": True,
    "DOWNLOAD_DELAY": 0,
    # Scrapy is CPU-bound at ~400 pages/s on loopback with 32 in flight; the per-domain
    # default of 8 caps a one-site crawl far below that.
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
    # Scrapy starts this many tasks for every response's output; a page yields one item, and 100
    # idle tasks per response cost more than extracting the page does.
    "CONCURRENT_ITEMS": 4,
    "AUTOTHROTTLE_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 30,
    "RETRY_TIMES": 2,
    # A docs page over 32 MiB is not a page: fail it (counted as an error) instead of hashing it.
    "DOWNLOAD_MAXSIZE": 32 * 1024 * 1024,
}
#: For sites you do not own: AutoThrottle keeps about one request in flight, at least 1 s apart.
POLITE_PROFILE: dict[str, Any] = {
    **FAST_PROFILE,
    "DOWNLOAD_DELAY": 1.0,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "AUTOTHROTTLE_ENABLED": True,
    "AUTOTHROTTLE_START_DELAY": 1.0,
    "AUTOTHROTTLE_TARGET_CONCURRENCY": 1.0,
}
PROFILES: dict[str, dict[str, Any]] = {"fast": FAST_PROFILE, "polite": POLITE_PROFILE}
#: the scheduler that keeps a run's page requests in the database (the frontier)
FRONTIER_SCHEDULER = "recrawler.scheduler.FrontierScheduler"
#: the extension that runs Spidermon's engine-stop monitors for a run refused at start
REFUSED_RUN_MONITORS: Any = "recrawler.monitors.RefusedRunMonitors"

#: numeric settings read by a parser of their own (``RECRAWLER_AUDIT_SAMPLE``: ``20``, ``1%``, ``0.01``)
_OWN_PARSER = frozenset({"RECRAWLER_AUDIT_SAMPLE"})
#: numbers whose default is None (unset: something else decides)
_OPTIONAL_NUMBERS = frozenset({"RECRAWLER_SEARCH_MIN_SIMILARITY"})


def _check_objects(settings: BaseSettings) -> None:
    """Every recrawler setting whose default is a dict reads as one (a JSON object given as text,
    ``-s 'RECRAWLER_INTERVAL_OVERRIDES={"/changelog": [600, 86400]}'``), or one ConfigurationError
    line names it."""
    for name in dir(default_settings):
        if not name.startswith("RECRAWLER_") or not isinstance(getattr(default_settings, name), dict):
            continue
        try:
            settings.getdict(name)
        except (TypeError, ValueError) as exc:
            raw = str(settings.get(name))
            msg = f"{name}: not a JSON object ({exc}), got {raw[:80]!r}{'...' if len(raw) > 80 else ''}"
            raise ConfigurationError(msg) from None


def _read_lists(settings: BaseSettings) -> None:
    """Every recrawler setting whose default is a list takes a JSON list given as text
    (``-s 'RECRAWLER_RENDER_PATTERNS=["/guide/"]'``, as the README shows it), not only Scrapy's
    comma-separated text: read as one item, ``["/guide/"]`` would be a regular expression (a
    character class) that matches every URL. Text that is not a JSON list stays comma-separated."""
    for name in dir(default_settings):
        if not name.startswith("RECRAWLER_") or not isinstance(getattr(default_settings, name), list):
            continue
        raw = settings.get(name)
        if not isinstance(raw, str) or not raw.lstrip().startswith("["):
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            # a regular expression or selector that starts with "[", say: one item, as Scrapy reads it
            continue
        if isinstance(value, list):
            settings.set(name, value, priority=settings.getpriority(name) or 0)


def _check_names(settings: BaseSettings) -> None:
    """A ``RECRAWLER_*`` setting (or environment variable) recrawler does not read is a spelling
    mistake that would do nothing: one WARNING each, naming the closest one recrawler reads."""
    known = [n for n in dir(default_settings) if n.startswith("RECRAWLER_")]
    environment = sorted({*ENVIRONMENT_SETTINGS, *OTHER_ENVIRONMENT})
    unknown = [
        (name, "setting", known)
        for name in settings
        if isinstance(name, str) and name.startswith("RECRAWLER_") and name not in known
    ]
    unknown += [(name, "environment variable", environment) for name in unknown_environment()]
    for name, kind, candidates in unknown:
        close = difflib.get_close_matches(
            name.removeprefix("RECRAWLER_"), [c.removeprefix("RECRAWLER_") for c in candidates], n=1
        )
        hint = f"did you mean RECRAWLER_{close[0]}?" if close else "see the settings reference"
        logger.warning(
            "%(name)s is not a recrawler %(kind)s (%(hint)s): it does nothing",
            {"name": name, "kind": kind, "hint": hint},
        )


#: where a project's setting comes from (what ``-s`` sets, its user typed: not said again)
_SOURCES = {"project": "settings.py", "spider": "the spider's custom_settings"}


def _say_overrides(settings: BaseSettings, profile: str) -> None:
    """One line at the start of a crawl naming the project's settings that override the crawl
    profile and what that costs: ``scrapy startproject``'s template sets ``DOWNLOAD_DELAY = 1``
    and ``CONCURRENT_REQUESTS_PER_DOMAIN = 1``, which make a 200-page crawl take minutes, not
    seconds. WARNING when they slow the crawl down, INFO otherwise; the project's settings win."""
    by_priority = {v: k for k, v in SETTINGS_PRIORITIES.items()}
    shown, slower = [], []
    for name, value in PROFILES[profile].items():
        source = _SOURCES.get(by_priority.get(settings.getpriority(name) or 0, ""))
        if source is None:
            continue
        got: float = settings.getbool(name) if isinstance(value, bool) else settings.getfloat(name)
        if got == value:
            continue
        shown.append(f"{name} = {settings.get(name)!r} ({source}; profile: {value!r})")
        if name == "DOWNLOAD_DELAY" and got > value:
            slower.append(
                f"one request every {got:g} s at best: 1,000 pages take {1000 * got / 60:,.0f} min or more"
            )
        elif name.startswith("CONCURRENT_REQUESTS") and got < value:
            slower.append(f"{got:g} request{'s' if got != 1 else ''} at a time instead of {value}")
        elif name == "AUTOTHROTTLE_ENABLED" and got:
            slower.append("AutoThrottle paces the crawl to the server's latency")
    if not shown:
        return
    cost = f": {'; '.join(slower)}" if slower else ""
    logger.log(
        logging.WARNING if slower else logging.INFO,
        "these settings override recrawler's %(profile)s profile: %(shown)s%(cost)s (drop them for the "
        "profile's pace; RECRAWLER_PROFILE = 'polite' is the pace for a site you do not own)",
        {"profile": profile, "shown": ", ".join(shown), "cost": cost},
    )


def _check_numbers(settings: BaseSettings) -> None:
    """Every numeric recrawler setting reads as the number its default is, or one
    ConfigurationError line names it (components read them with ``getint`` / ``getfloat``)."""
    for name in dir(default_settings):
        default = getattr(default_settings, name)
        if (
            not name.startswith("RECRAWLER_")
            or name in _OWN_PARSER
            or isinstance(default, bool)
            or not isinstance(default, int | float)
        ):
            continue
        raw = settings.get(name)
        try:
            int(raw) if isinstance(default, int) else float(raw)
        except (TypeError, ValueError):
            kind = "a whole number" if isinstance(default, int) else "a number"
            raise ConfigurationError(f"{name}: must be {kind}, got {raw!r}") from None
    for name in _OPTIONAL_NUMBERS:
        raw = settings.get(name)
        try:
            float(raw) if raw is not None else None
        except (TypeError, ValueError):
            raise ConfigurationError(f"{name}: must be a number, got {raw!r}") from None


def _replace_builtin(settings: BaseSettings, builtin: type, ours: type, priority: int | None = None) -> None:
    """Put *ours* (a subclass) in the place of Scrapy's *builtin* downloader middleware (at
    *priority*, else at the builtin's), unless the project placed or disabled *builtin* itself
    (then its choice stands)."""
    own = settings.getdict("DOWNLOADER_MIDDLEWARES")
    if any(_loads(name) in (builtin, ours) for name in own):
        return
    with contextlib.suppress(KeyError):
        settings.replace_in_component_priority_dict("DOWNLOADER_MIDDLEWARES_BASE", builtin, ours, priority)


def _loads(name: Any) -> Any:
    try:
        return load_object(name) if isinstance(name, str) else name
    except (ImportError, ValueError, NameError, AttributeError):
        return None


class RecrawlerAddon:
    """Enable with ``ADDONS = {"recrawler.addon.RecrawlerAddon": 0}``.

    Installs every ``RECRAWLER_*`` default, the crawl profile (``RECRAWLER_PROFILE``) at addon
    priority (your project's own settings still win), the page-key request fingerprinter, the
    components below and the ``SCHEDULER`` (the run's frontier in the database, or scrapy-redis's
    with ``RECRAWLER_WORKERS_ENABLED``), for spiders that opt in (``recrawler_enabled = True``:
    the ``docs`` spider and ``RecrawlerSpiderMixin`` set it). Any other spider of the project
    runs as if recrawler were not installed. ``RECRAWLER_DB_URI``, ``RECRAWLER_EVENTS_URI``,
    ``RECRAWLER_WEBHOOK_URL``, ``RECRAWLER_WEBHOOK_SECRET`` and the site's credentials
    (``RECRAWLER_AUTH_USER``, ``_PASSWORD``, ``_HEADERS``, ``_COOKIES_FILE``) are taken from the
    environment when set there (over the project's settings file, under ``-s``). Set nowhere,
    the database is ``recrawler.db`` in Scrapy's project data directory (:func:`project_db_uri`);
    a relative SQLite path the project's own settings give is in the project directory too. A
    crawl says in one line which project settings override the profile; a ``RECRAWLER_*`` name it
    does not read is one WARNING; a list setting takes a JSON list given as text.
    """

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Keep the crawler: the spider class decides whether recrawler acts at all."""
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        """Apply defaults and place components at fixed priorities (opted-in spiders only)."""
        if self.crawler is not None and not spider_opted_in(self.crawler.spidercls):
            # silent, as a component that is switched off: this spider never sees recrawler
            raise NotConfigured
        for name in dir(default_settings):
            if name.startswith("RECRAWLER_"):
                settings.set(name, getattr(default_settings, name), priority="default")
        # the project's relative SQLite path is the project's file, from whatever folder
        resolve_project_db(settings)
        # a deployment's environment overrides the project's settings file, not -s
        apply_environment(settings)
        if (settings.getpriority("RECRAWLER_DB_URI") or 0) <= SETTINGS_PRIORITIES["default"]:
            # set by no one: the project's data directory, created for a crawl (not for the CLI)
            uri = project_db_uri(create=self.crawler is not None)
            settings.set("RECRAWLER_DB_URI", uri, priority="default")
        profile = settings.get("RECRAWLER_PROFILE")
        if profile not in PROFILES:
            msg = f"RECRAWLER_PROFILE: unknown profile {profile!r} (use one of: {', '.join(PROFILES)})"
            raise ConfigurationError(msg)
        for name, value in PROFILES[profile].items():
            settings.set(name, value, priority="addon")
        if self.crawler is not None:
            _say_overrides(settings, profile)
        _check_names(settings)
        _read_lists(settings)
        _check_numbers(settings)
        _check_objects(settings)
        # a bad one stops the crawl before it starts, in one line
        FacetPattern.from_setting(settings.get("RECRAWLER_VERSION_PATTERN"))
        if self.crawler is not None and settings.getlist("RECRAWLER_RENDER_PATTERNS"):
            # a crawl's only: the CLI renders nothing (and needs no browser installed)
            for name, value in render_settings(settings, self.crawler).items():
                # the browser's guard wraps a project's own hooks, so it takes their place
                guarded = name in GUARDED_SETTINGS and settings.getpriority(name)
                settings.set(name, value, priority=guarded or "addon")
        if settings.getbool("RECRAWLER_WORKERS_ENABLED"):
            # scrapy-redis is an extra (recrawler[workers]): one line if it is missing
            require("scrapy_redis", "RECRAWLER_WORKERS_ENABLED")
            self._shared_frontier(settings)
        if self.crawler is not None:
            # the run's page requests wait in the frontier queue (RECRAWLER_FRONTIER_ENABLED), and
            # the sitemap files and the unseen pages' checks in its queues; a project's own
            # SCHEDULER still wins. A crawl's only, and only a spider that opted in gets here
            settings.set("SCHEDULER", FRONTIER_SCHEDULER, priority="addon")
        if (settings.getpriority("LOG_FORMATTER") or 0) <= SETTINGS_PRIORITIES["default"]:
            # Scrapy's per-request lines without the credentials a URL carries (?token=, ?api_key=)
            settings.set("LOG_FORMATTER", "recrawler.logformatter.RedactingLogFormatter", priority="addon")
        # Only replace Scrapy's own fingerprinter, never a user's.
        if (settings.getpriority("REQUEST_FINGERPRINTER_CLASS") or 0) <= 0:
            settings.set(
                "REQUEST_FINGERPRINTER_CLASS",
                "recrawler.requests.PageKeyRequestFingerprinter",
                priority="addon",
            )
        # Scrapy's own middlewares, subclassed: a 429/503 slows the host down (Retry-After), and the
        # page requests robots.txt forbids are counted (a run that could check nothing is an outage)
        _replace_builtin(settings, RetryMiddleware, PoliteRetryMiddleware)
        _replace_builtin(settings, RobotsTxtMiddleware, CountedRobotsTxtMiddleware)
        # ...and a page that decompresses past DOWNLOAD_MAXSIZE (a gzip bomb) is a counted error
        _replace_builtin(settings, HttpCompressionMiddleware, BoundedHttpCompressionMiddleware)
        # ...and a page's redirect moves it, lends it an address or misses it; moved from 600 to
        # 541: below CredentialsMiddleware (545), so a redirect to the login page is never followed
        _replace_builtin(settings, RedirectMiddleware, PageRedirectMiddleware, 541)
        # 540: below RetryMiddleware (550) and PageRedirectMiddleware (541), so process_response and
        # process_exception see only final outcomes, after retries and redirects.
        settings.setdefault_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", ConditionalRequestMiddleware, 540
        )
        # 530: below every middleware that reads a response's body (decompression at 590, retries,
        # credentials, rendering, redirects, validators, the audit: 535 to 550), so a large sitemap
        # file's body goes to disk last, just before the scraper would count it
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", ListingBodyMiddleware, 530)
        # 40: first, so a URL outside the spider's policy is never downloaded (nor its host's
        # robots.txt: RobotsTxtMiddleware is at 100)
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", UrlPolicyMiddleware, 40)
        # 700 then 800: late, so a project's enrichment pipelines run first; IndexPipeline writes
        # the page (state, chunks, events) last, in one transaction.
        settings.setdefault_in_component_priority_dict("ITEM_PIPELINES", ClassifyPipeline, 700)
        settings.setdefault_in_component_priority_dict("ITEM_PIPELINES", IndexPipeline, 800)
        # Extension order is irrelevant: they work from signals only. The Runtime owns the crawl's
        # state; every other component finds it with crawler.get_extension(Runtime). The run's
        # shared collaborators are extensions too, found by class: the schedule policy (its run
        # clock), the noise registry, the auditor and the embedder (RECRAWLER_INDEX_ENABLED).
        settings.setdefault_in_component_priority_dict("EXTENSIONS", Runtime, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", SchedulePolicy, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", NoiseRegistry, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", Auditor, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", RunEmbedder, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", Reconciler, 0)
        settings.setdefault_in_component_priority_dict("EXTENSIONS", DownloadFailureLog, 0)
        # off unless RECRAWLER_VECTORSTORE_SINKS names a store (NotConfigured): after a publication
        settings.setdefault_in_component_priority_dict("EXTENSIONS", VectorStoreSinks, 0)
        if settings.getbool("SPIDERMON_ENABLED") and importlib.util.find_spec("spidermon") is not None:
            # a run refused at start has no engine_stopped: its monitors run at spider_closed
            # (by path: the module needs Spidermon, an extra)
            settings.setdefault_in_component_priority_dict("EXTENSIONS", REFUSED_RUN_MONITORS, 0)
            # its monitor runner logs through Spider.log(), which warns on every run
            quiet_library_deprecations("spidermon")
        # 545: the answer reaches it before ConditionalRequestMiddleware (540), so a refused login
        # (401, a redirect to the login page) stops the run and is never followed or indexed;
        # after Scrapy's HttpAuthMiddleware (300), whose Authorization (HTTPAUTH_*) wins.
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", CredentialsMiddleware, 545)
        # 542: a 200 to render is sent again to the browser before ConditionalRequestMiddleware
        # (540) accounts for it, and after CredentialsMiddleware (545) vetted it.
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", RenderMiddleware, 542)
        # 535: above ConditionalRequestMiddleware (540), so the validators it attaches are on the
        # request and its 304 accounting is done when an audited 304 is turned into a refetch.
        settings.setdefault_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", AuditMiddleware, 535)
        # Spider output runs from high to low numbers: the listing (110) tags and bounds what a
        # sitemap yields, deltafetch (100, scrapy-deltafetch's own suggestion) drops immutable
        # pages, then the schedule (90) decides the rest.
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", ListingMiddleware, 110)
        # 105: a page's own output, before deltafetch (100) would remember a soft 404 as fetched
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", SoftNotFoundMiddleware, 105)
        # 104: the links a page answered with once a soft 404's are dropped (105), all of them,
        # before the schedule (90) decides which pages they lead to are requested
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", LinkListingMiddleware, 104)
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", DeltaFetchMiddleware, 100)
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", ScheduleMiddleware, 90)
        # 85: a page whose text moved under the same validator is fetched again, once the soft
        # 404s (105) are out; the recheck is no listed page for the schedule (90) to decide
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", RecheckMiddleware, 85)

    def _shared_frontier(self, settings: BaseSettings) -> None:
        """Several workers share the run's frontier: the same FrontierScheduler, its queue in Redis
        (``recrawler.queues.RedisQueue``, its keys per spider, site and run, each page key once per
        run across the workers) unless the project names a queue class of its own."""
        if (settings.getpriority("RECRAWLER_QUEUE_CLASS") or 0) <= SETTINGS_PRIORITIES["addon"]:
            settings.set("RECRAWLER_QUEUE_CLASS", REDIS_QUEUE, priority="addon")
        # any order: it only withholds a joining worker's start requests
        settings.setdefault_in_component_priority_dict("SPIDER_MIDDLEWARES", WorkerStartMiddleware, 120)
