-- recrawler state schema 16 (PostgreSQL; SQLite's 13): each page's version and language
-- (RECRAWLER_VERSION_PATTERN, else what the page says: docsearch:version, docsearch:language,
-- hreflang, <html lang>), and a copy on each of its chunks, which search, the changes feed and the
-- LangChain retriever filter on. Pages and chunks stored before this migration have none (they are
-- in every version and language) until a run reads them again. IF NOT EXISTS: columns already there
-- are left as they are.
ALTER TABLE pages ADD COLUMN IF NOT EXISTS version TEXT, ADD COLUMN IF NOT EXISTS lang TEXT;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS version TEXT, ADD COLUMN IF NOT EXISTS lang TEXT;
