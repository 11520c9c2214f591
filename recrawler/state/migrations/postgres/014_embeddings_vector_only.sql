-- recrawler state schema 14 (PostgreSQL): the embedding cache keeps each vector once, as pgvector's
-- `embedding`. Its copy as float32 bytes (`vector`, what SQLite's cache and search read) was never
-- read here, and made each row of a 384-number vector 3 KB, past the size where PostgreSQL tries
-- to compress a row: storing a first run's 16,060 vectors took 0.62-0.69 s against 0.28-0.36 s.
ALTER TABLE embeddings DROP COLUMN vector;
