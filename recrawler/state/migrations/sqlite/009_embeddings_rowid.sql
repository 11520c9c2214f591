-- recrawler state schema 9: the embedding cache becomes a rowid table. Its rows (a 384-number
-- vector is 1.5 KB) are far larger than WITHOUT ROWID suits, which stores each row inside its key's
-- b-tree: storing a run's vectors took about twice as long, and looking a text up read through
-- them. The key (embedder, text hash) stays the primary key, kept as an index of its own.
CREATE TABLE embeddings_rowid (
    embedder   TEXT NOT NULL,
    text_hash  TEXT NOT NULL,
    vector     BLOB NOT NULL,
    PRIMARY KEY (embedder, text_hash)
);
INSERT INTO embeddings_rowid (embedder, text_hash, vector)
    SELECT embedder, text_hash, vector FROM embeddings ORDER BY embedder, text_hash;
DROP TABLE embeddings;
ALTER TABLE embeddings_rowid RENAME TO embeddings;
