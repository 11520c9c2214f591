-- recrawler state schema 2: the knowledge base (chunks, embeddings) and run publication.
-- A chunk row is visible to search when a published run added it and no published run retired it.
ALTER TABLE runs ADD COLUMN state TEXT NOT NULL DEFAULT 'finished';
ALTER TABLE runs ADD COLUMN published_at TEXT;
ALTER TABLE runs ADD COLUMN embedder TEXT;
ALTER TABLE pages ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0;

CREATE TABLE chunks (
    id           INTEGER PRIMARY KEY,
    key          TEXT NOT NULL,
    chunk_index  INTEGER NOT NULL,
    chunk_hash   TEXT NOT NULL,
    url          TEXT NOT NULL,
    heading      TEXT NOT NULL,
    text         TEXT NOT NULL,
    added_run    INTEGER NOT NULL,
    retired_run  INTEGER,
    -- why it was retired: 0 replaced by a newer version, 1 quarantined (kept to restore), 2 gone
    retired_why  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX chunks_key ON chunks (key, retired_run);
CREATE INDEX chunks_added ON chunks (added_run);
CREATE INDEX chunks_retired ON chunks (retired_run);
CREATE INDEX chunks_hash ON chunks (chunk_hash);

-- Embeddings are a cache keyed by (embedder, text hash): a text embedded once is never paid again.
CREATE TABLE embeddings (
    embedder   TEXT NOT NULL,
    text_hash  TEXT NOT NULL,
    vector     BLOB NOT NULL,
    PRIMARY KEY (embedder, text_hash)
) WITHOUT ROWID;

-- Runs recorded before the knowledge base existed are history, not pending publications.
UPDATE runs SET published_at = finished_at, state = 'published' WHERE finished_at IS NOT NULL
