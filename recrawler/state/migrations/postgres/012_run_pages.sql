-- recrawler state schema 12 (PostgreSQL): what each run took out of the knowledge base, as it stood
-- when the run ended (see migrations/sqlite/012_run_pages.sql).
CREATE TABLE run_pages (
    run_id    INTEGER NOT NULL,
    key       TEXT NOT NULL,
    url       TEXT NOT NULL,
    title     TEXT,
    event     TEXT NOT NULL,
    moved_to  TEXT,
    at        TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
ALTER TABLE runs ADD COLUMN pages_recorded INTEGER;
