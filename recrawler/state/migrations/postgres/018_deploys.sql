-- recrawler state schema 18 (PostgreSQL): deploys are seen, and a page is verified by a request or
-- by a signal the self-audit trusts (see migrations/sqlite/018_deploys.sql).
ALTER TABLE pages ADD COLUMN verified_at TEXT;
ALTER TABLE pages ADD COLUMN verified_by TEXT;
ALTER TABLE pages ADD COLUMN solo INTEGER NOT NULL DEFAULT 0;
UPDATE pages SET verified_at = COALESCE(last_check_at, last_checked), verified_by = 'request'
    WHERE COALESCE(last_check_at, last_checked) IS NOT NULL;
CREATE TABLE site_builds (
    site           TEXT PRIMARY KEY,
    fingerprint    TEXT NOT NULL DEFAULT '{}',
    noise          TEXT NOT NULL DEFAULT '[]',
    lastmod_noise  INTEGER NOT NULL DEFAULT 0,
    deploy_at      TEXT,
    deploy_run     INTEGER,
    deploy_reason  TEXT,
    updated_at     TEXT NOT NULL
);
