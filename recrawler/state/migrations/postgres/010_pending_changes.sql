-- recrawler state schema 10 (PostgreSQL): what the bot sees is published, and only what is published is told.
-- A page whose stored state differs from what the knowledge base shows (a run not published yet:
-- running, held, killed, or unpublished by an error) is pending: 'new' (not in the knowledge base
-- at all) or 'changed'. Its published state waits in page_before until the run that covers it is
-- published (then it is dropped) or discarded (then it is put back: pages, fields and all).
ALTER TABLE pages ADD COLUMN pending TEXT;
CREATE INDEX pages_site_pending ON pages (site, pending) WHERE pending IS NOT NULL;

CREATE TABLE page_before (
    key            TEXT PRIMARY KEY,
    site           TEXT NOT NULL,
    -- the run that first made the page pending since the last publication
    run_id         INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('new', 'changed')),
    url            TEXT,
    etag           TEXT,
    last_modified  TEXT,
    lastmod        TEXT,
    content_hash   TEXT,
    fuzzy_hash     TEXT,
    title          TEXT,
    status         TEXT,
    misses         INTEGER,
    last_checked   TEXT,
    last_changed   TEXT,
    changed_run    INTEGER,
    chunks         INTEGER,
    noise_key      TEXT,
    found_depth    INTEGER,
    moved_to       TEXT,
    -- the page's published field record (f_present 0: it had none)
    f_present      INTEGER NOT NULL DEFAULT 0,
    f_title        TEXT,
    f_headings     TEXT,
    f_code         TEXT,
    f_links        TEXT,
    f_text         BYTEA,
    f_blocks       BYTEA
);
CREATE INDEX page_before_site ON page_before (site);

-- Events are a durable log: each names its run and page, and goes out once its run is published
-- (never for a held or discarded run); delivered rows are marked, not deleted.
ALTER TABLE outbox ADD COLUMN run_id INTEGER;
ALTER TABLE outbox ADD COLUMN key TEXT;
ALTER TABLE outbox ADD COLUMN action TEXT;
ALTER TABLE outbox ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
CREATE INDEX outbox_undelivered ON outbox (delivered, id);
CREATE INDEX outbox_run ON outbox (run_id, key);

-- Misses a mass-removal hold keeps for a decision: carried from run to run until `runs approve`,
-- `runs discard` or a later run's own evidence (the page answers again) settles them.
ALTER TABLE run_misses ADD COLUMN kept INTEGER NOT NULL DEFAULT 0;
