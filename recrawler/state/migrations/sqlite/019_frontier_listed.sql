-- recrawler state schema 19: a frontier row says whether a listing (a sitemap, an llms.txt) named
-- its page, so a page a link queued first still counts once as listed when its sitemap names it.
ALTER TABLE frontier ADD COLUMN listed INTEGER NOT NULL DEFAULT 0;
