-- recrawler state schema 18 (PostgreSQL): deploys are seen, and a page is verified by a request or
-- by a signal the self-audit trusts (see migrations/sqlite/018_deploys.sql). IF NOT EXISTS: applied
-- again over a database that has them, it changes nothing.
ALTER TABLE pages ADD COLUMN IF NOT EXISTS verified_at TEXT;
ALTER TABLE pages ADD COLUMN IF NOT EXISTS verified_by TEXT;
ALTER TABLE pages ADD COLUMN IF NOT EXISTS solo INTEGER NOT NULL DEFAULT 0;
UPDATE pages SET verified_at = COALESCE(last_check_at, last_checked), verified_by = 'request'
    WHERE verified_at IS NULL AND COALESCE(last_check_at, last_checked) IS NOT NULL;
CREATE TABLE IF NOT EXISTS site_builds (
    site           TEXT PRIMARY KEY,
    fingerprint    TEXT NOT NULL DEFAULT '{}',
    noise          TEXT NOT NULL DEFAULT '[]',
    lastmod_noise  INTEGER NOT NULL DEFAULT 0,
    deploy_at      TEXT,
    deploy_run     INTEGER,
    deploy_reason  TEXT,
    updated_at     TEXT NOT NULL
);
