-- recrawler state schema 5: moved pages, bounded discovery, run outcomes, one run at a time.
-- pages.status gains 'moved' (a permanent redirect moved the page to moved_to). SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt with every column it had.
CREATE TABLE pages_v5 (
    key            TEXT PRIMARY KEY,
    site           TEXT NOT NULL,
    url            TEXT NOT NULL,
    etag           TEXT,
    last_modified  TEXT,
    lastmod        TEXT,
    content_hash   TEXT,
    fuzzy_hash     TEXT,
    title          TEXT,
    status         TEXT NOT NULL DEFAULT 'live'
                   CHECK (status IN ('live', 'quarantined', 'gone', 'moved')),
    misses         INTEGER NOT NULL DEFAULT 0,
    first_seen     TEXT NOT NULL,
    last_checked   TEXT,
    last_changed   TEXT,
    last_seen_run  INTEGER,
    verify_run     INTEGER,
    chunks         INTEGER NOT NULL DEFAULT 0,
    noise_key      TEXT,
    last_check_at  TEXT,
    next_check_at  TEXT,
    check_interval REAL,
    check_count    REAL NOT NULL DEFAULT 0,
    change_count   REAL NOT NULL DEFAULT 0,
    checked_secs   REAL NOT NULL DEFAULT 0,
    change_rate    REAL,
    listed_run     INTEGER,
    listed_skip    TEXT,
    audit_run      INTEGER,
    found_via      TEXT,
    found_from     TEXT,
    -- how many links away from a listed page discovery found it: bounds link traps across runs
    found_depth    INTEGER NOT NULL DEFAULT 0,
    -- the key a permanent redirect moved the page to (status 'moved')
    moved_to       TEXT,
    -- the run that last made the page new or changed (the spike and same-content rules read it)
    changed_run    INTEGER
);
INSERT INTO pages_v5 (key, site, url, etag, last_modified, lastmod, content_hash, fuzzy_hash, title,
    status, misses, first_seen, last_checked, last_changed, last_seen_run, verify_run, chunks,
    noise_key, last_check_at, next_check_at, check_interval, check_count, change_count,
    checked_secs, change_rate, listed_run, listed_skip, audit_run, found_via, found_from)
SELECT key, site, url, etag, last_modified, lastmod, content_hash, fuzzy_hash, title,
    status, misses, first_seen, last_checked, last_changed, last_seen_run, verify_run, chunks,
    noise_key, last_check_at, next_check_at, check_interval, check_count, change_count,
    checked_secs, change_rate, listed_run, listed_skip, audit_run, found_via, found_from
FROM pages;
DROP TABLE pages;
ALTER TABLE pages_v5 RENAME TO pages;
CREATE INDEX pages_site_seen ON pages (site, last_seen_run);
CREATE INDEX pages_site_due ON pages (site, next_check_at);
CREATE INDEX pages_changed_run ON pages (changed_run);

-- A staged permanent redirect: the page moves to moved_to when the run reconciles.
ALTER TABLE run_misses ADD COLUMN moved_to TEXT;

-- How a run ended, for people and scripts: why it was held or why removals were skipped
-- (a JSON list), how many pages its listing named, and the exit code `scrapy crawl` returned.
ALTER TABLE runs ADD COLUMN reasons TEXT;
ALTER TABLE runs ADD COLUMN listed INTEGER;
ALTER TABLE runs ADD COLUMN exit_code INTEGER;
-- Runs that never finished (their holder died) are marked aborted when their lease is taken over.
UPDATE runs SET state = 'aborted', finish_reason = COALESCE(finish_reason, 'aborted')
    WHERE state = 'running' AND finished_at IS NULL;

-- One run at a time per site: the run holding the lease, and its last heartbeat.
CREATE TABLE leases (
    site          TEXT PRIMARY KEY,
    run_id        INTEGER NOT NULL,
    holder        TEXT NOT NULL,
    acquired_at   TEXT NOT NULL,
    heartbeat_at  TEXT NOT NULL
) WITHOUT ROWID
