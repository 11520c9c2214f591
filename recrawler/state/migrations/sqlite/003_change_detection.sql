-- recrawler state schema 3: change detection that ignores noise, field-level records and history.
-- The noise configuration a page's hash was computed with (patterns, learned regions, selectors).
ALTER TABLE pages ADD COLUMN noise_key TEXT;

-- What a page says, field by field, and its normalised blocks (8-byte hashes in page order).
CREATE TABLE page_fields (
    key       TEXT PRIMARY KEY,
    title     TEXT,
    headings  TEXT,
    code      TEXT,
    links     TEXT,
    text      BLOB,
    blocks    BLOB
);

-- How many live pages of a site hold each normalised block; boilerplate blocks are dropped.
CREATE TABLE site_blocks (
    site         TEXT NOT NULL,
    block        INTEGER NOT NULL,
    pages        INTEGER NOT NULL DEFAULT 0,
    boilerplate  INTEGER NOT NULL DEFAULT 0,
    sample       TEXT,
    PRIMARY KEY (site, block)
) WITHOUT ROWID;

-- Regions (CSS selectors inside the main content) learned as volatile for a site.
CREATE TABLE site_regions (
    site          TEXT NOT NULL,
    selector      TEXT NOT NULL,
    source        TEXT NOT NULL,
    learned_from  TEXT,
    first_seen    TEXT NOT NULL,
    hits          INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (site, selector)
);

-- Append-only history: every change (and every change a fuzzy match let through).
CREATE TABLE page_changes (
    id              INTEGER PRIMARY KEY,
    key             TEXT NOT NULL,
    url             TEXT NOT NULL,
    run_id          INTEGER NOT NULL,
    at              TEXT NOT NULL,
    verdict         TEXT NOT NULL,
    old_hash        TEXT,
    new_hash        TEXT,
    changed_fields  TEXT,
    distance        INTEGER,
    critical        TEXT,
    diff            TEXT,
    -- the page's blocks before the change: a change that turns out to be boilerplate is taken back
    old_blocks      BLOB
);
CREATE INDEX page_changes_key ON page_changes (key, id)
