-- recrawler state schema 13 (PostgreSQL): a chunk's words are a column the writer fills (split in
-- Python as a query's words are, see recrawler.kb.ranking.chunk_words), and the full-text index
-- files that column. The index of schema 11 ran a regular expression and the text parser over every
-- chunk as it was inserted: two thirds of a first run's chunk inserts. Chunks stored before this
-- migration get their words from that same expression (a superset of what the writer stores).
ALTER TABLE chunks ADD COLUMN words tsvector;
UPDATE chunks SET words = to_tsvector('simple', regexp_replace(heading || ' ' || text, '[^[:alnum:]]+', ' ', 'g'));
ALTER TABLE chunks ALTER COLUMN words SET NOT NULL;
DROP INDEX chunks_words;
CREATE INDEX chunks_words ON chunks USING gin (words);
