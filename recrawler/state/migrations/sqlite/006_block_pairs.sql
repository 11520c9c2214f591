-- recrawler state schema 6: boilerplate learned over adjacent block pairs instead of single blocks.
-- How many pages of a site hold each adjacent pair of normalised blocks (0 stands for the page's
-- start or end). Blocks chained by boilerplate pairs are shared runs: at a page edge the site's
-- furniture, among a page's own content a run whose place and length the hash keeps. Counted from
-- the stored page_fields.blocks when a database from before this schema is first opened.
CREATE TABLE site_pairs (
    site         TEXT NOT NULL,
    prev         INTEGER NOT NULL,
    block        INTEGER NOT NULL,
    pages        INTEGER NOT NULL DEFAULT 0,
    boilerplate  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (site, prev, block)
) WITHOUT ROWID;
CREATE INDEX site_pairs_boilerplate ON site_pairs (site) WHERE boilerplate = 1;
