-- recrawler state schema 7 (PostgreSQL): sitemaps asked conditionally, the frontier on disk,
-- indexes for size. The same tables as SQLite's 007_frontier.sql.
CREATE TABLE sitemap_files (
    url            TEXT PRIMARY KEY,
    etag           TEXT,
    last_modified  TEXT,
    urls           INTEGER NOT NULL DEFAULT 0,
    parsed_run     INTEGER NOT NULL,
    fetched_at     TEXT NOT NULL
);

CREATE TABLE sitemap_entries (
    sitemap  TEXT NOT NULL,
    url      TEXT NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('page', 'sitemap')),
    lastmod  TEXT,
    run_id   INTEGER NOT NULL,
    pos      INTEGER NOT NULL,
    PRIMARY KEY (sitemap, url)
);
CREATE INDEX sitemap_entries_pos ON sitemap_entries (sitemap, pos);

CREATE TABLE frontier (
    run_id    INTEGER NOT NULL,
    key       TEXT NOT NULL,
    rank      INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    request   BYTEA NOT NULL,
    fed       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX frontier_next ON frontier (run_id, fed, rank, seq);

CREATE INDEX pages_site_status ON pages (site, status, key);
