-- recrawler state schema 12: what each run took out of the knowledge base, as it stood when the run
-- ended. A run's report showed its quarantined, gone and moved pages as they are now: a page
-- quarantined by run 4 and made gone by run 5 vanished from run 4's report. Runs that ended
-- before this migration have no rows (runs.pages_recorded stays NULL) and are shown as before.
CREATE TABLE run_pages (
    run_id    INTEGER NOT NULL,
    key       TEXT NOT NULL,
    url       TEXT NOT NULL,
    title     TEXT,
    -- quarantined, gone or moved: the page's status when the run ended
    event     TEXT NOT NULL,
    -- moved: the page key of its new address
    moved_to  TEXT,
    -- when the run decided it (the page's last_checked then)
    at        TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
-- how many pages the run's end recorded there (NULL: none recorded, a run from before schema 12)
ALTER TABLE runs ADD COLUMN pages_recorded INTEGER;
