-- recrawler state schema 13: each page's version and language (RECRAWLER_VERSION_PATTERN, else
-- what the page says: docsearch:version, docsearch:language, hreflang, <html lang>), and a copy on
-- each of its chunks, which search, the changes feed and the LangChain retriever filter on. Pages
-- and chunks stored before this migration have none (they are in every version and language)
-- until a run reads them again.
ALTER TABLE pages ADD COLUMN version TEXT;
ALTER TABLE pages ADD COLUMN lang TEXT;
ALTER TABLE chunks ADD COLUMN version TEXT;
ALTER TABLE chunks ADD COLUMN lang TEXT;
