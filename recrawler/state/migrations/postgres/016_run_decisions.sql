-- recrawler state schema 16 (PostgreSQL): the decision an operator took on a run that waited for
-- one (see migrations/sqlite/016_run_decisions.sql). The conditional update that takes it is
-- re-checked on the row's newest version when two transactions race for it (READ COMMITTED).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS decision TEXT;
