-- recrawler state schema 4: adaptive revisits, how pages were found, trust in a host's signals,
-- and immutable pages (scrapy-deltafetch keys). Independent of schema 3.
-- Revisit state: the run clock of the last check, when the page is due next, the interval chosen,
-- and the estimator's n (checks), X (changes found) and summed intervals (seconds).
ALTER TABLE pages ADD COLUMN last_check_at TEXT;
ALTER TABLE pages ADD COLUMN next_check_at TEXT;
ALTER TABLE pages ADD COLUMN check_interval REAL;
ALTER TABLE pages ADD COLUMN check_count REAL NOT NULL DEFAULT 0;
ALTER TABLE pages ADD COLUMN change_count REAL NOT NULL DEFAULT 0;
ALTER TABLE pages ADD COLUMN checked_secs REAL NOT NULL DEFAULT 0;
ALTER TABLE pages ADD COLUMN change_rate REAL;
-- The run whose listing (sitemap, feed, links) decided the page: requested or skipped on purpose.
ALTER TABLE pages ADD COLUMN listed_run INTEGER;
-- In that run, the layer that skipped it (schedule, lastmod, deltafetch), or NULL: requested.
ALTER TABLE pages ADD COLUMN listed_skip TEXT;
-- The run that drew the page into its self-audit sample.
ALTER TABLE pages ADD COLUMN audit_run INTEGER;
-- How the page was first found: sitemap, feed, link or request; and from where (feed or page URL).
ALTER TABLE pages ADD COLUMN found_via TEXT;
ALTER TABLE pages ADD COLUMN found_from TEXT;
CREATE INDEX pages_site_due ON pages (site, next_check_at);

-- Per host and signal (lastmod, etag, last_modified): audited claims and lies; a liar is switched off.
CREATE TABLE trust (
    host        TEXT NOT NULL,
    signal      TEXT NOT NULL,
    checks      INTEGER NOT NULL DEFAULT 0,
    lies        INTEGER NOT NULL DEFAULT 0,
    trusted     INTEGER NOT NULL DEFAULT 1,
    last_lie_at TEXT,
    last_lie_url TEXT,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (host, signal)
) WITHOUT ROWID;

-- scrapy-deltafetch's seen keys, per spider: fetched once, skipped on later runs.
CREATE TABLE deltafetch (
    spider     TEXT NOT NULL,
    key        TEXT NOT NULL,
    url        TEXT NOT NULL,
    page_key   TEXT,
    stored_at  TEXT NOT NULL,
    PRIMARY KEY (spider, key)
) WITHOUT ROWID;
CREATE INDEX deltafetch_page ON deltafetch (page_key)
