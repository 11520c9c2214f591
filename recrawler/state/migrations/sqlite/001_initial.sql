-- recrawler state schema 1: pages, runs, staged misses and the event outbox.
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY,
    spider        TEXT NOT NULL,
    site          TEXT,
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    finish_reason TEXT,
    counts        TEXT,
    report        TEXT
);

CREATE TABLE pages (
    key            TEXT PRIMARY KEY,
    site           TEXT NOT NULL,
    url            TEXT NOT NULL,
    etag           TEXT,
    last_modified  TEXT,
    lastmod        TEXT,
    content_hash   TEXT,
    fuzzy_hash     TEXT,
    title          TEXT,
    status         TEXT NOT NULL DEFAULT 'live' CHECK (status IN ('live', 'quarantined', 'gone')),
    misses         INTEGER NOT NULL DEFAULT 0,
    first_seen     TEXT NOT NULL,
    last_checked   TEXT,
    last_changed   TEXT,
    last_seen_run  INTEGER,
    verify_run     INTEGER
);
CREATE INDEX pages_site_seen ON pages (site, last_seen_run);

-- 404/410 answers of a run, applied by the reconciliation only when the run is trustworthy.
CREATE TABLE run_misses (
    run_id       INTEGER NOT NULL,
    key          TEXT NOT NULL,
    http_status  INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- Events written in the same transaction as the change they describe, delivered after commit.
CREATE TABLE outbox (
    id       INTEGER PRIMARY KEY,
    payload  TEXT NOT NULL
);
