-- recrawler state schema 11: what search reads besides the chunks. A keyword index of the chunks
-- (FTS5, kept by triggers in the transaction that writes a chunk row), the cached vectors in
-- blocks stored a dimension at a time (written when a run publishes; a query reads only the
-- dimensions its vector uses), and what each vector-store sink holds.
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    heading, text, content='chunks', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE chunks_fts_terms USING fts5vocab(chunks_fts, 'row');
INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
END;
CREATE TRIGGER chunks_fts_update AFTER UPDATE OF heading, text ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
    INSERT INTO chunks_fts (rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;

-- 16,384 cached vectors of one embedder (in embeddings rowid order) per block: the block's
-- rowids here, its numbers in vector_columns, one float16 column per dimension
CREATE TABLE vector_blocks (
    embedder   TEXT NOT NULL,
    block      INTEGER NOT NULL,
    last_row   INTEGER NOT NULL,
    last_hash  TEXT NOT NULL,
    rowids     BLOB NOT NULL,
    PRIMARY KEY (embedder, block)
);
CREATE TABLE vector_columns (
    embedder   TEXT NOT NULL,
    dim        INTEGER NOT NULL,
    block      INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (embedder, dim, block)
);

-- the chunks a vector-store sink has put into its store (state 1) or is putting there (state 0)
CREATE TABLE sink_chunks (
    sink        TEXT NOT NULL,
    id          TEXT NOT NULL,
    key         TEXT NOT NULL,
    chunk_hash  TEXT NOT NULL,
    state       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sink, id)
);
