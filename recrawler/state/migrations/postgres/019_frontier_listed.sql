-- recrawler state schema 19 (PostgreSQL): a frontier row says whether a listing named its page (see
-- migrations/sqlite/019_frontier_listed.sql). IF NOT EXISTS: applied again, it changes nothing.
ALTER TABLE frontier ADD COLUMN IF NOT EXISTS listed INTEGER NOT NULL DEFAULT 0;
