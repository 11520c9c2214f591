-- recrawler state schema 7: sitemaps asked conditionally, the frontier on disk, indexes for size.
-- Each sitemap file's validators (sent back as If-None-Match / If-Modified-Since) and how many
-- pages it listed when it was last read; a file that answers 304 is not read again.
CREATE TABLE sitemap_files (
    url            TEXT PRIMARY KEY,
    etag           TEXT,
    last_modified  TEXT,
    urls           INTEGER NOT NULL DEFAULT 0,
    parsed_run     INTEGER NOT NULL,
    fetched_at     TEXT NOT NULL
) WITHOUT ROWID;

-- What each sitemap file listed when it was last read: pages (with their lastmod) and further
-- sitemap files. The listing of an unchanged file is taken from here.
CREATE TABLE sitemap_entries (
    sitemap  TEXT NOT NULL,
    url      TEXT NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('page', 'sitemap')),
    lastmod  TEXT,
    run_id   INTEGER NOT NULL,
    -- where in the file it stands: the stored listing comes back in the file's own order
    pos      INTEGER NOT NULL,
    PRIMARY KEY (sitemap, url)
) WITHOUT ROWID;
CREATE INDEX sitemap_entries_pos ON sitemap_entries (sitemap, pos);

-- A run's frontier: the page requests its listing let through, fed to Scrapy in bounded batches
-- (a page key once per run). Rows are taken as they are fed; other runs' rows are stale.
CREATE TABLE frontier (
    run_id    INTEGER NOT NULL,
    key       TEXT NOT NULL,
    -- minus the request's priority, then the order rows came in: the next batch is an index range
    rank      INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    request   BLOB NOT NULL,
    fed       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX frontier_next ON frontier (run_id, fed, rank, seq);

-- Reconciliation at size: a run's staged misses and its unseen pages without a table scan.
CREATE INDEX pages_site_status ON pages (site, status, key)
