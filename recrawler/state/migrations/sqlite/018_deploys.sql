-- recrawler state schema 18: deploys are seen, and a page is verified by a request or by a signal
-- the self-audit trusts. Each page says when it was last verified and by what ('request', or the
-- listing's 'lastmod' or 'feed' entry vouching for it), and whether its changes were found to come
-- on their own (solo: they are no sample of a deploy). Each site keeps its build fingerprint, the
-- fingerprint slots learned to vary per request, and its last detected deploy: pages not checked
-- since are due, and the freshness panel counts them unchecked.
ALTER TABLE pages ADD COLUMN verified_at TEXT;
ALTER TABLE pages ADD COLUMN verified_by TEXT;
ALTER TABLE pages ADD COLUMN solo INTEGER NOT NULL DEFAULT 0;
UPDATE pages SET verified_at = COALESCE(last_check_at, last_checked), verified_by = 'request'
    WHERE COALESCE(last_check_at, last_checked) IS NOT NULL;
CREATE TABLE site_builds (
    site           TEXT PRIMARY KEY,
    -- slot -> marker (JSON object) and the slots that vary per request (JSON array)
    fingerprint    TEXT NOT NULL DEFAULT '{}',
    noise          TEXT NOT NULL DEFAULT '[]',
    -- lastmods that moved without a change found (a sitemap stamping each read): no deploy sign
    lastmod_noise  INTEGER NOT NULL DEFAULT 0,
    -- the last deploy detected: when (run clock), by which run, and why
    deploy_at      TEXT,
    deploy_run     INTEGER,
    deploy_reason  TEXT,
    updated_at     TEXT NOT NULL
) WITHOUT ROWID;
