-- recrawler state schema 11 (PostgreSQL): a full-text index of the chunks, their words split as
-- SQLite's FTS5 splits them (letters and digits), and what each vector-store sink holds. The
-- vector part of search is pgvector's HNSW index; SQLite's vector blocks have no table here.
CREATE INDEX chunks_words ON chunks
    USING gin (to_tsvector('simple', regexp_replace(heading || ' ' || text, '[^[:alnum:]]+', ' ', 'g')));

CREATE TABLE sink_chunks (
    sink        TEXT NOT NULL,
    id          TEXT NOT NULL,
    key         TEXT NOT NULL,
    chunk_hash  TEXT NOT NULL,
    state       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sink, id)
);
