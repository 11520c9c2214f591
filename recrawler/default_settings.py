"""Every ``RECRAWLER_*`` default, grouped by area; the add-on installs them at ``default`` priority."""

from __future__ import annotations

# --- state: one database holds crawl state (and, later, the knowledge base) ----------------------
# Where state lives: sqlite:///relative.db, sqlite:////absolute.db, a bare path, or
# postgresql://user:password@host/db (recrawler[postgres]; password from the environment). None:
# recrawler.db in Scrapy's project data directory (.scrapy beside scrapy.cfg, or the working directory).
RECRAWLER_DB_URI: str | None = None
# Pages written per database transaction commit (group commit; each page stays atomic; a group
# also commits RECRAWLER_DB_COMMIT_SECS after its first write).
RECRAWLER_DB_BATCH_SIZE = 1000
# Longest time a finished page write waits for its group commit.
RECRAWLER_DB_COMMIT_SECS = 2.0
# How long to wait for a lock held by another process before giving up.
RECRAWLER_DB_TIMEOUT_SECS = 10.0
# PostgreSQL: stored vectors of one size get their HNSW index once there are this many (built
# once, when a run's store closes); fewer are searched exactly.
RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS = 10_000
# PostgreSQL: the HNSW build's m (links per vector, 2-100) and ef_construction (candidates per
# insert, twice m to 1000). pgvector's defaults (16, 64) found 0.84 of the exact top 10 at a
# million chunks of a real model's vectors; these find 0.99, for a build about four times as long
# and a larger index. Changed, the index is rebuilt with them when the next run that stores
# vectors closes (the old one dropped then).
RECRAWLER_DB_HNSW_M = 32
RECRAWLER_DB_HNSW_EF_CONSTRUCTION = 128
# One run at a time per site: a run's lease lapses when its holder misses heartbeats this long
# (heartbeats come every quarter of it); a later run then takes over and marks it aborted.
RECRAWLER_LEASE_SECS = 60.0
# With the hashing embedder (it only computes), the workers embed a page's new chunk texts as
# they chunk them; the run's end embeds what they did not. Off: all at the run's end.
RECRAWLER_CPU_EMBED = True
# The workers' scheduling priority below the crawl's process (os.nice increment, 0-19): the
# process that feeds them keeps its core; 0: the same priority.
RECRAWLER_CPU_NICE = 10
# Worker processes for per-page CPU work (extraction, fingerprints, chunks), off the crawl's
# interpreter lock: "auto" is one per usable core (at most 4); 0: none (RECRAWLER_CPU_THREADS
# then do it).
RECRAWLER_CPU_PROCESSES = "auto"
# Threads for per-page CPU work the workers do not take (or all of it without them); 0: inline.
RECRAWLER_CPU_THREADS = 2
# While a run crawls, Python's garbage collector leaves what was loaded before it alone (gc.freeze)
# and runs young collections every this many allocations (Python's own: 700); 0: left as it is.
RECRAWLER_GC_THRESHOLD = 10_000
# URI scheme -> import path of the StateStore backend (like FEED_STORAGES).
RECRAWLER_STATE_BACKENDS = {
    "sqlite": "recrawler.state.sqlite.SQLiteStateStore",
    "file": "recrawler.state.sqlite.SQLiteStateStore",
    "postgresql": "recrawler.state.postgres.PostgreSQLStateStore",
    "postgres": "recrawler.state.postgres.PostgreSQLStateStore",
}

# --- URL keys ----------------------------------------------------------------------------------
# Query parameters dropped from page keys (fnmatch patterns, case-insensitive).
RECRAWLER_URL_DROP_PARAMS = [
    "utm_*",
    "gclid",
    "gbraid",
    "wbraid",
    "dclid",
    "fbclid",
    "msclkid",
    "yclid",
    "twclid",
    "igshid",
    "mc_cid",
    "mc_eid",
    "_ga",
    "_gl",
    "_hsenc",
    "_hsmi",
    "mkt_tok",
    "ref_src",
]
# When non-empty, only these query parameters (fnmatch patterns) are kept in page keys.
RECRAWLER_URL_KEEP_PARAMS: list[str] = []

# --- the listing: sitemaps, feeds, links (every URL is http(s) on the site's hosts) ------------
# Sitemap index levels followed below a start URL (robots.txt -> index -> sitemap is 2).
RECRAWLER_SITEMAP_MAX_DEPTH = 3
# Sitemap files fetched per run, at most (50,000 URLs each by the protocol).
RECRAWLER_SITEMAP_MAX_FILES = 1000
# Sitemap files downloaded and read at once, at most: memory stays flat however big each file is.
RECRAWLER_SITEMAP_CONCURRENCY = 2
# Pages a run's listing may name, at most; beyond it the listing counts as incomplete.
RECRAWLER_LISTING_MAX_URLS = 5_000_000
# Keep the run's page requests in the database and feed Scrapy a batch at a time (flat memory).
RECRAWLER_FRONTIER_ENABLED = True
# Requests per frontier batch, and entries per write of a sitemap file's stored listing.
RECRAWLER_FRONTIER_BATCH_SIZE = 500
# A listing naming fewer pages than this share of the last run's is a failed listing, not proof.
RECRAWLER_LISTING_MIN_RATIO = 0.5

# --- conditional requests ----------------------------------------------------------------------
# Send stored ETag / Last-Modified back as If-None-Match / If-Modified-Since.
RECRAWLER_CONDITIONAL_ENABLED = True
# Conditional requests a host answered in full with the very validators they sent (it could have
# said 304), with no 304 at all, before it is reported as ignoring validators.
RECRAWLER_CONDITIONAL_NO_304_AFTER = 20

# --- content extraction and fingerprint ---------------------------------------------------------
# Main-content candidates, first match wins (CSS selectors).
RECRAWLER_CONTENT_SELECTORS = ["main", "article", "[role=main]", "#content", "body"]
# Extra elements removed from the main content before hashing (CSS selectors).
RECRAWLER_CONTENT_NOISE_SELECTORS: list[str] = []
# A regex searched in each page's URL whose named groups version and lang give the page's version
# and language, over what the page says of itself (docsearch:version, docsearch:language, a
# hreflang naming the page, <html lang>): r"/(?P<lang>[a-z]{2})/(?P<version>[^/]+)/" reads
# /en/stable/. None: what the pages say.
RECRAWLER_VERSION_PATTERN: str | None = None

# --- documents that are not HTML ----------------------------------------------------------------
# Read PDFs (recrawler[pdf]: pypdf) like pages: text, outline headings, chunks, fingerprint.
RECRAWLER_PDF_ENABLED = True
# A PDF with more pages is a page error (pdf_too_long), never read in part.
RECRAWLER_PDF_MAX_PAGES = 2000
# A PDF not read within this many seconds is a page error (pdf_timeout), never a hang.
RECRAWLER_PDF_TIMEOUT_SECS = 60.0

# --- pages that need JavaScript (recrawler[render]: scrapy-playwright and a Chromium) -----------
# URL regexes (searched) of pages rendered in a headless browser after a 200: "/app/", or a host
# ("//docs.example.com/") for a whole site. Empty: no browser is ever started.
RECRAWLER_RENDER_PATTERNS: list[str] = []
# The Chromium executable (None: chromium, chromium-browser or google-chrome on PATH).
RECRAWLER_RENDER_BROWSER: str | None = None
# Pages rendering in the browser at once.
RECRAWLER_RENDER_CONCURRENCY = 4
# When the DOM is read: "load", "domcontentloaded" or "networkidle" (no request for 0.5 s: what a
# script fetched is in).
RECRAWLER_RENDER_WAIT_UNTIL = "networkidle"

# --- reconciliation: gone pages and the outage guard ---------------------------------------------
# Check stored pages that this run did not reach with a direct request before the spider closes.
RECRAWLER_VERIFY_UNSEEN_ENABLED = True
# Consecutive 404 answers after which a quarantined page becomes gone.
RECRAWLER_GONE_AFTER_MISSES = 2
# Statuses that prove a page is gone at once (RFC 9110 §15.5.11: 410 is intentionally permanent).
RECRAWLER_GONE_STATUSES = [410]
# Statuses that put a page in quarantine and count a miss.
RECRAWLER_MISSING_STATUSES = [404]
# Soft 404s count as misses, never as content: a 200 that became a short "not found" page, a
# redirect to the site's home, a target several pages are lent by temporary redirects in one run.
RECRAWLER_SOFT404_ENABLED = True
# Above this share of failed page requests (5xx, timeouts, DNS), nothing is quarantined or gone.
RECRAWLER_MAX_ERROR_RATIO = 0.2
# Unseen pages scheduled per spider_idle round.
RECRAWLER_VERIFY_BATCH_SIZE = 500
# A run that would quarantine, remove or move more than this share of the site's live pages
# removes nothing and is held for `recrawler runs approve` (raise it for one planned restructure).
RECRAWLER_MAX_REMOVE_RATIO = 0.1
# ...but a run may always remove this many pages (small sites).
RECRAWLER_MAX_REMOVE_MIN = 3

# --- credentials: docs behind a login (sent to the site's own hosts only; secrets in the environment)
# HTTP basic auth: the user and the password (set the password in the environment, never in a file).
RECRAWLER_AUTH_USER: str | None = None
RECRAWLER_AUTH_PASSWORD: str | None = None
# Headers sent with every request to the site: {"Authorization": "Bearer ..."}, {"X-Api-Key": "..."}
# (in the environment as a JSON object).
RECRAWLER_AUTH_HEADERS: dict[str, str] = {}
# A Netscape cookies.txt (curl -c, a browser's export) whose cookies for the site's hosts are sent.
RECRAWLER_AUTH_COOKIES_FILE: str | None = None
# Answers that mean the site refused the credentials (a login that expired): the run stops.
RECRAWLER_AUTH_FAILED_STATUSES = [401, 403]
# A regex searched in a redirect's target: a redirect to the login page is a refused login too.
RECRAWLER_AUTH_LOGIN_URL: str | None = None

# --- run report and events ---------------------------------------------------------------------
# new+changed above this share of crawled pages: warning, ``alert`` in the report, run held.
RECRAWLER_CHANGE_ALERT_RATIO = 0.5
# Write the run report as JSON to this path (None: no file).
RECRAWLER_REPORT_FILE: str | None = None
# Write the run's HTML report (`recrawler report`) to this path after each run; {run_id} is
# replaced by the run's id (None: no file).
RECRAWLER_REPORT_HTML_FILE: str | None = None
# Runs of the site the HTML report's charts show.
RECRAWLER_REPORT_HTML_RUNS = 20
# Deliver page events: file:///path/events.jsonl (None: no events are written).
RECRAWLER_EVENTS_URI: str | None = None

# --- webhooks: committed events POSTed in signed batches when the run ends ----------------------
# Where to POST events (None: no webhook). Also read from the environment.
RECRAWLER_WEBHOOK_URL: str | None = None
# First wait before a retry, doubled each attempt, with jitter (at most 60 s).
RECRAWLER_WEBHOOK_BACKOFF_SECS = 1.0
# Events per POST.
RECRAWLER_WEBHOOK_BATCH_SIZE = 100
# Retries of one batch (on 408, 425, 429, 5xx, timeouts and connection errors) before the events
# are left in the outbox for the next delivery.
RECRAWLER_WEBHOOK_MAX_RETRIES = 5
# HMAC-SHA256 key of the X-Recrawler-Signature header: set it in the environment, never in a file.
RECRAWLER_WEBHOOK_SECRET: str | None = None
# Timeout of one POST.
RECRAWLER_WEBHOOK_TIMEOUT_SECS = 10.0

# --- change detection: noise out, critical edits in ----------------------------------------------
# Drop the site's furniture (blocks chained to a page edge by adjacent block pairs repeated on a
# large share of its pages) from the hash (learned per site).
RECRAWLER_BOILERPLATE_ENABLED = True
# A pair of adjacent blocks on at least this share of a site's live pages becomes boilerplate...
RECRAWLER_BOILERPLATE_SHARE = 0.5
# ...and stops being boilerplate only below this share (hysteresis: no flip-flopping).
RECRAWLER_BOILERPLATE_EXIT_SHARE = 0.35
# Sites with fewer live pages than this have no boilerplate (a block on 2 of 3 pages is content).
RECRAWLER_BOILERPLATE_MIN_PAGES = 10
# Normalise volatile tokens (dates in "last updated" lines, relative times, counters, ids).
RECRAWLER_VOLATILE_ENABLED = True
# Extra volatile patterns: {"docs.example.com": [regex, ...], "*": [regex, ...]}.
RECRAWLER_VOLATILE_PATTERNS: dict[str, list[str]] = {}
# Re-fetch at once a page whose validators say "same" but whose text moved, and learn the regions
# that differ between the two fetches as volatile for the site.
RECRAWLER_VOLATILE_LEARN = True
# TLSH distance within which a page counts as unchanged unless a critical token changed
# (None: off, exact comparison only).
RECRAWLER_FUZZY_THRESHOLD: int | None = None
# Per-site fuzzy thresholds: {"docs.example.com": 30}.
RECRAWLER_FUZZY_THRESHOLDS: dict[str, int | None] = {}
# Largest unified diff kept per history entry, in characters.
RECRAWLER_DIFF_MAX_BYTES = 20_000

# --- knowledge base: chunks, embeddings, publication --------------------------------------------
# Keep the knowledge base (chunks + embeddings) in the state database.
RECRAWLER_INDEX_ENABLED = True
# Largest chunk, in characters (a new chunk also starts at every heading).
RECRAWLER_CHUNK_SIZE = 1200
# Characters carried from one chunk into the next when a section is split.
RECRAWLER_CHUNK_OVERLAP = 150
# Chunks of one page, at most (its first ones): a huge page is not tens of thousands of embeddings.
RECRAWLER_CHUNK_MAX_PER_PAGE = 500
# "hashing" (offline, lexical), "sentence-transformers:<model>" or "openai:<model>".
RECRAWLER_EMBEDDER = "hashing"
# Base URL of an OpenAI-protocol /v1/embeddings server (None: https://api.openai.com/v1).
RECRAWLER_EMBEDDER_BASE_URL: str | None = None
# API key (None: $RECRAWLER_EMBEDDER_API_KEY, then $OPENAI_API_KEY). Never commit one.
RECRAWLER_EMBEDDER_API_KEY: str | None = None
# Texts per embedder call.
RECRAWLER_EMBEDDER_BATCH_SIZE = 64
# Retries (with backoff) on 429, 5xx and connection errors before the run is left unpublished.
RECRAWLER_EMBEDDER_MAX_RETRIES = 5
# Timeout of one embedder call.
RECRAWLER_EMBEDDER_TIMEOUT_SECS = 60.0
# "run": search switches to a run's changes when the run finishes; "page": as each page commits.
RECRAWLER_PUBLISH = "run"
# The version a search shows when none is asked for (recrawler search, open_kb() from the project,
# the LangChain retriever): "stable". Pages with no version are in every version's. None: all.
RECRAWLER_SEARCH_DEFAULT_VERSION: str | None = None
# MiB of vector columns a process searching a SQLite knowledge base keeps from one query to the
# next (the dimensions it met last; each is 1 byte per cached vector); 0: read them every time.
RECRAWLER_SEARCH_CACHE_MB = 128
# A search's vector hits are the chunks whose cosine to the query is above this (None: the embedder's
# own floor, measured: hashing and all-MiniLM-L6-v2 0.40, openai 0.0); a query with no word of the
# pages and no chunk above it finds nothing.
RECRAWLER_SEARCH_MIN_SIMILARITY: float | None = None
# A change spike (see RECRAWLER_CHANGE_ALERT_RATIO) needs at least this many new+changed pages.
RECRAWLER_CHANGE_ALERT_MIN = 10
# LangChain vector stores mirrored after each published run: {name: import path of a callable
# that returns the VectorStore} (recrawler.kb.sync; empty: none).
RECRAWLER_VECTORSTORE_SINKS: dict[str, str] = {}
# Crawl and classify, report what would be embedded, deleted and published; write nothing.
RECRAWLER_DRY_RUN = False

# --- schedule: deploys, the staleness bound, sitemap lastmod, feeds, links -------------------------
# "adaptive": request only pages that are due; "all": check every page (a forced full pass).
RECRAWLER_SCHEDULE = "adaptive"
# Listed page requests decided per database round trip.
RECRAWLER_SCHEDULE_BATCH_SIZE = 500
# The run's clock, an ISO-8601 time (None: the wall clock when the run starts).
RECRAWLER_NOW: str | None = None
# The staleness bound: each page is checked once per bound at a time of its own (spread evenly over
# the runs; a run at least this often keeps every page within it), unless a signal the self-audit
# trusts (a sitemap lastmod, a feed entry) vouches for it. A check of an unchanged page costs a 304.
# Per-URL overrides may set a longer one (archived versions) or a shorter one (a changelog).
RECRAWLER_MAX_INTERVAL_SECS = 86400.0
# Per-URL bounds: {regex searched in the URL: bound_secs}, first match wins (null: the default).
RECRAWLER_INTERVAL_OVERRIDES: dict[str, float | list[float | None] | None] = {}
# Sitemap lastmod (and feed entry dates): a newer one makes the page due at once; an older one
# vouches for the page in "skip" (until caught lying) and "hint" (once the audit found them honest);
# "ignore" reads none.
RECRAWLER_LASTMOD_MODE = "hint"
# Deploy detection: live pages probed first in each run (conditional requests: the site's home page,
# then pages drawn at random) for the build's fingerprint and rewritten files; 0: none.
RECRAWLER_DEPLOY_PROBES = 4
# The signals that make a run check every page of the site (see docs/reference.md, "Deploys"):
# flag (-a deployed=1), listing, fingerprint, validators, sample.
RECRAWLER_DEPLOY_SIGNALS = ["flag", "listing", "fingerprint", "validators", "sample"]
# Following links (-a start_url=, or -a follow_links=1): how many links away from a start URL or a
# listed page discovery goes (across runs). A Sphinx API reference is 4 to 6 clicks below its
# root; a link trap (a calendar, a session id in a URL) stops here.
RECRAWLER_FOLLOW_DEPTH_LIMIT = 10
# Following links: pages no run stored before, found through links per run, at most (0: no
# limit). A site crawled from a start URL that has more is found over several runs (its listing
# counts as incomplete until then: nothing is removed).
RECRAWLER_FOLLOW_MAX_LINKS = 10_000

# --- immutable pages (scrapy-deltafetch, kept in the state database) -----------------------------
# URLs fetched once and then skipped (regexes searched in the URL: versioned docs, dated notes).
RECRAWLER_IMMUTABLE_PATTERNS: list[str] = []

# --- self-audit and trust ----------------------------------------------------------------------
# Pages per run fetched in full whatever the cheap layers say: a share below 1 (rounded up) or a count.
RECRAWLER_AUDIT_SAMPLE = 0.01
# Lies after which a host's signal (lastmod, etag, last_modified) is switched off.
RECRAWLER_AUDIT_DISTRUST_AFTER = 1
# Audited claims, none a lie, after which a host's lastmods count as honest (they vouch for their
# pages in RECRAWLER_LASTMOD_MODE = "hint").
RECRAWLER_AUDIT_TRUST_AFTER = 10

# --- crawl profile ------------------------------------------------------------------------------
# "fast" (your own site: no delay, 32 concurrent per host) or "polite" (AutoThrottle, 1 s delay).
RECRAWLER_PROFILE = "fast"
# A 429 or 503 slows its host down to the Retry-After it sent, at most this long between requests.
RECRAWLER_RETRY_AFTER_MAX_SECS = 60.0
# A site whose every answer for this long (3 at least) was a failure (5xx, 429, timeouts, refused
# connections) is down: the run stops (recrawler_site_down), nothing is removed, exit 4. 0: never.
RECRAWLER_OUTAGE_SECS = 120.0

# --- several workers, one run (scrapy-redis) ------------------------------------------------------
# Workers started alike share one run of a site through Redis (REDIS_URL): scrapy-redis holds the
# frontier, the first worker leads (listing, unseen checks, the closing work once, after the last).
RECRAWLER_WORKERS_ENABLED = False
# A worker (or leader) that misses its heartbeats this long is gone.
RECRAWLER_WORKERS_TTL_SECS = 15.0
# How long a joining worker waits for its leader to announce the run.
RECRAWLER_WORKERS_WAIT_SECS = 30.0
