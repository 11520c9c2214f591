"""The one schema of the state database (SQLAlchemy Core), for SQLite and PostgreSQL alike."""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    text,
)

__all__ = ["metadata"]

metadata = MetaData()

# Times are ISO 8601 text (UTC, fixed width where SQL compares them), so text order is time order
# on every backend and the stored values of schema 1-6 databases need no conversion.

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("spider", Text, nullable=False),
    Column("site", Text),
    Column("started_at", Text, nullable=False),
    Column("finished_at", Text),
    Column("finish_reason", Text),
    Column("counts", Text),
    Column("report", Text),
    Column("state", Text, nullable=False, server_default=text("'finished'")),
    Column("published_at", Text),
    Column("embedder", Text),
    Column("reasons", Text),
    Column("listed", Integer),
    Column("exit_code", Integer),
    Column("pages_recorded", Integer),
    Column("decision", Text),
)

pages = Table(
    "pages",
    metadata,
    Column("key", Text, primary_key=True),
    Column("site", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("etag", Text),
    Column("last_modified", Text),
    Column("lastmod", Text),
    Column("content_hash", Text),
    Column("fuzzy_hash", Text),
    Column("title", Text),
    Column("status", Text, nullable=False, server_default=text("'live'")),
    Column("misses", Integer, nullable=False, server_default=text("0")),
    Column("first_seen", Text, nullable=False),
    Column("last_checked", Text),
    Column("last_changed", Text),
    Column("last_seen_run", Integer),
    Column("verify_run", Integer),
    Column("chunks", Integer, nullable=False, server_default=text("0")),
    Column("noise_key", Text),
    Column("last_check_at", Text),
    Column("next_check_at", Text),
    Column("check_interval", Float),
    Column("check_count", Float, nullable=False, server_default=text("0")),
    Column("change_count", Float, nullable=False, server_default=text("0")),
    Column("checked_secs", Float, nullable=False, server_default=text("0")),
    Column("change_rate", Float),
    Column("listed_run", Integer),
    Column("listed_skip", Text),
    Column("audit_run", Integer),
    Column("found_via", Text),
    Column("found_from", Text),
    Column("found_depth", Integer, nullable=False, server_default=text("0")),
    Column("moved_to", Text),
    Column("changed_run", Integer),
    # not published yet: 'new' (not in the knowledge base) or 'changed'; see page_before (schema 10)
    Column("pending", Text),
    # the page's version and language, copied onto its chunks (schema 13)
    Column("version", Text),
    Column("lang", Text),
    # when the page was last verified (run clock), and by what: 'request', 'lastmod', 'feed' (schema 18)
    Column("verified_at", Text),
    Column("verified_by", Text),
    # its changes come on their own: no sample of a deploy (schema 18)
    Column("solo", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("status IN ('live', 'quarantined', 'gone', 'moved')"),
    Index("pages_site_seen", "site", "last_seen_run"),
    Index("pages_site_due", "site", "next_check_at"),
    Index("pages_changed_run", "changed_run"),
    Index("pages_site_status", "site", "status", "key"),
    Index(
        "pages_site_pending",
        "site",
        "pending",
        sqlite_where=text("pending IS NOT NULL"),
        postgresql_where=text("pending IS NOT NULL"),
    ),
)

# 404/410 answers and permanent redirects of a run, applied only when the run is trustworthy
run_misses = Table(
    "run_misses",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("http_status", Integer, nullable=False),
    Column("moved_to", Text),
    # kept by a mass-removal hold for a decision, carried from run to run (schema 10)
    Column("kept", Integer, nullable=False, server_default=text("0")),
)

# events written in the same transaction as the change they describe, delivered after commit
outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("payload", Text, nullable=False),
    # a durable log: each event's run and page; it goes out once its run is published (schema 10)
    Column("run_id", Integer),
    Column("key", Text),
    Column("action", Text),
    Column("delivered", Integer, nullable=False, server_default=text("0")),
    Index("outbox_undelivered", "delivered", "id"),
    Index("outbox_run", "run_id", "key"),
)

# a chunk row is visible to search when a published run added it and no published run retired it
chunks = Table(
    "chunks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", Text, nullable=False),
    Column("chunk_index", Integer, nullable=False),
    Column("chunk_hash", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("heading", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("added_run", Integer, nullable=False),
    Column("retired_run", Integer),
    # why it was retired: 0 replaced by a newer version, 1 quarantined (kept to restore), 2 gone
    Column("retired_why", Integer, nullable=False, server_default=text("0")),
    # the page's version and language when the row was written or relabelled (schema 13)
    Column("version", Text),
    Column("lang", Text),
    Index("chunks_key", "key", "retired_run"),
    Index("chunks_added", "added_run"),
    Index("chunks_retired", "retired_run"),
    Index("chunks_hash", "chunk_hash"),
)

# a cache keyed by (embedder, text hash): a text embedded once is never paid for again
embeddings = Table(
    "embeddings",
    metadata,
    Column("embedder", Text, primary_key=True),
    Column("text_hash", Text, primary_key=True),
    Column("vector", LargeBinary, nullable=False),
)

# what a page says, field by field, and its normalised blocks (8-byte hashes in page order)
page_fields = Table(
    "page_fields",
    metadata,
    Column("key", Text, primary_key=True),
    Column("title", Text),
    Column("headings", Text),
    Column("code", Text),
    Column("links", Text),
    Column("text", LargeBinary),
    Column("blocks", LargeBinary),
)

site_blocks = Table(
    "site_blocks",
    metadata,
    Column("site", Text, primary_key=True),
    Column("block", Integer, primary_key=True),
    Column("pages", Integer, nullable=False, server_default=text("0")),
    Column("boilerplate", Integer, nullable=False, server_default=text("0")),
    Column("sample", Text),
    sqlite_with_rowid=False,
)

site_regions = Table(
    "site_regions",
    metadata,
    Column("site", Text, primary_key=True),
    Column("selector", Text, primary_key=True),
    Column("source", Text, nullable=False),
    Column("learned_from", Text),
    Column("first_seen", Text, nullable=False),
    Column("hits", Integer, nullable=False, server_default=text("1")),
)

# append-only history: every change (and every change a fuzzy match let through)
page_changes = Table(
    "page_changes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("run_id", Integer, nullable=False),
    Column("at", Text, nullable=False),
    Column("verdict", Text, nullable=False),
    Column("old_hash", Text),
    Column("new_hash", Text),
    Column("changed_fields", Text),
    Column("distance", Integer),
    Column("critical", Text),
    Column("diff", Text),
    Column("old_blocks", LargeBinary),
    Index("page_changes_key", "key", "id"),
)

trust = Table(
    "trust",
    metadata,
    Column("host", Text, primary_key=True),
    Column("signal", Text, primary_key=True),
    Column("checks", Integer, nullable=False, server_default=text("0")),
    Column("lies", Integer, nullable=False, server_default=text("0")),
    Column("trusted", Integer, nullable=False, server_default=text("1")),
    Column("last_lie_at", Text),
    Column("last_lie_url", Text),
    Column("updated_at", Text, nullable=False),
    sqlite_with_rowid=False,
)

# scrapy-deltafetch's seen keys, per spider: fetched once, skipped on later runs
deltafetch = Table(
    "deltafetch",
    metadata,
    Column("spider", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("page_key", Text),
    Column("stored_at", Text, nullable=False),
    Index("deltafetch_page", "page_key"),
    sqlite_with_rowid=False,
)

# one run at a time per site: the run holding the lease, and its last heartbeat
leases = Table(
    "leases",
    metadata,
    Column("site", Text, primary_key=True),
    Column("run_id", Integer, nullable=False),
    Column("holder", Text, nullable=False),
    Column("acquired_at", Text, nullable=False),
    Column("heartbeat_at", Text, nullable=False),
    sqlite_with_rowid=False,
)

# pages of a site holding each adjacent pair of normalised blocks (0: the page's start or end)
site_pairs = Table(
    "site_pairs",
    metadata,
    Column("site", Text, primary_key=True),
    Column("prev", Integer, primary_key=True),
    Column("block", Integer, primary_key=True),
    Column("pages", Integer, nullable=False, server_default=text("0")),
    Column("boilerplate", Integer, nullable=False, server_default=text("0")),
    Index(
        "site_pairs_boilerplate",
        "site",
        sqlite_where=text("boilerplate = 1"),
        postgresql_where=text("boilerplate = 1"),
    ),
    sqlite_with_rowid=False,
)

# each sitemap file's validators and page count when last read (schema 7)
sitemap_files = Table(
    "sitemap_files",
    metadata,
    Column("url", Text, primary_key=True),
    Column("etag", Text),
    Column("last_modified", Text),
    Column("urls", Integer, nullable=False, server_default=text("0")),
    Column("parsed_run", Integer, nullable=False),
    Column("fetched_at", Text, nullable=False),
    sqlite_with_rowid=False,
)

# what each sitemap file listed when last read: the listing of an unchanged file
sitemap_entries = Table(
    "sitemap_entries",
    metadata,
    Column("sitemap", Text, primary_key=True),
    Column("url", Text, primary_key=True),
    Column("kind", Text, CheckConstraint("kind IN ('page', 'sitemap')"), nullable=False),
    Column("lastmod", Text),
    Column("run_id", Integer, nullable=False),
    Column("pos", Integer, nullable=False),
    Index("sitemap_entries_pos", "sitemap", "pos"),
    sqlite_with_rowid=False,
)

# a run's page requests, fed to Scrapy in bounded batches (one row per page key and run)
frontier = Table(
    "frontier",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("rank", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("request", LargeBinary, nullable=False),
    Column("fed", Integer, nullable=False, server_default=text("0")),
    # a listing named the page (schema 19): a page a link queued first counts once as listed
    Column("listed", Integer, nullable=False, server_default=text("0")),
    Index("frontier_next", "run_id", "fed", "rank", "seq"),
    sqlite_with_rowid=False,
)

# a page write's change of its block set, until reconciliation folds it into the counters (schema 8)
block_deltas = Table(
    "block_deltas",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("site", Text, nullable=False),
    Column("old_blocks", LargeBinary, nullable=False),
    Column("new_blocks", LargeBinary, nullable=False),
    Column("samples", Text),
)

# the published state of a page that is pending (schema 10): dropped when its run is published,
# put back when it is discarded
page_before = Table(
    "page_before",
    metadata,
    Column("key", Text, primary_key=True),
    Column("site", Text, nullable=False),
    Column("run_id", Integer, nullable=False),
    Column("kind", Text, nullable=False),
    Column("url", Text),
    Column("etag", Text),
    Column("last_modified", Text),
    Column("lastmod", Text),
    Column("content_hash", Text),
    Column("fuzzy_hash", Text),
    Column("title", Text),
    Column("status", Text),
    Column("misses", Integer),
    Column("last_checked", Text),
    Column("last_changed", Text),
    Column("changed_run", Integer),
    Column("chunks", Integer),
    Column("noise_key", Text),
    Column("found_depth", Integer),
    Column("moved_to", Text),
    Column("f_present", Integer, nullable=False, server_default=text("0")),
    Column("f_title", Text),
    Column("f_headings", Text),
    Column("f_code", Text),
    Column("f_links", Text),
    Column("f_text", LargeBinary),
    Column("f_blocks", LargeBinary),
    CheckConstraint("kind IN ('new', 'changed')"),
    Index("page_before_site", "site"),
)

# the cached vectors of one embedder in blocks of 16,384, one float16 column per dimension (schema
# 11, SQLite only: PostgreSQL searches with pgvector); chunks_fts, the FTS5 keyword index, is a
# virtual table and not described here
vector_blocks = Table(
    "vector_blocks",
    metadata,
    Column("embedder", Text, primary_key=True),
    Column("block", Integer, primary_key=True),
    Column("last_row", Integer, nullable=False),
    Column("last_hash", Text, nullable=False),
    Column("rowids", LargeBinary, nullable=False),
)

vector_columns = Table(
    "vector_columns",
    metadata,
    Column("embedder", Text, primary_key=True),
    Column("dim", Integer, primary_key=True),
    Column("block", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

# the chunks each vector-store sink put into its store (state 1) or is putting there (0)
sink_chunks = Table(
    "sink_chunks",
    metadata,
    Column("sink", Text, primary_key=True),
    Column("id", Text, primary_key=True),
    Column("key", Text, nullable=False),
    Column("chunk_hash", Text, nullable=False),
    Column("state", Integer, nullable=False, server_default=text("0")),
)

# what each run took out of the knowledge base, as it stood when the run ended (schema 12)
run_pages = Table(
    "run_pages",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("title", Text),
    Column("event", Text, nullable=False),
    Column("moved_to", Text),
    Column("at", Text, nullable=False),
    sqlite_with_rowid=False,
)

# each site's build fingerprint, the slots that vary per request, its last detected deploy (schema 18)
site_builds = Table(
    "site_builds",
    metadata,
    Column("site", Text, primary_key=True),
    Column("fingerprint", Text, nullable=False, server_default=text("'{}'")),
    Column("noise", Text, nullable=False, server_default=text("'[]'")),
    Column("lastmod_noise", Integer, nullable=False, server_default=text("0")),
    Column("deploy_at", Text),
    Column("deploy_run", Integer),
    Column("deploy_reason", Text),
    Column("updated_at", Text, nullable=False),
    sqlite_with_rowid=False,
)

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, nullable=False),
)
