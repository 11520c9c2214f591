-- recrawler state schema 8: a page's write leaves its block-set change here, one row per page
-- write, instead of updating site_blocks / site_pairs row by row. The run's reconciliation folds
-- the rows into those counters (summed, in key order, in batches) before it re-decides
-- boilerplate; rows a killed run left are folded by the next one.
CREATE TABLE block_deltas (
    id          INTEGER PRIMARY KEY,
    site        TEXT NOT NULL,
    -- the page's block hashes before and after the write (packed, in page order)
    old_blocks  BLOB NOT NULL,
    new_blocks  BLOB NOT NULL,
    -- the first 200 characters of each block the write added (JSON: hash -> text), kept as the
    -- block's sample once it is on two pages
    samples     TEXT
);
