-- recrawler state schema 16: the decision an operator took on a run that waited for one
-- (`approved` or `discarded`; NULL: none taken). `runs approve` and `runs discard` take it with one
-- conditional update of the run's row (set only while it is NULL), in the transaction that carries
-- the decision out: started together, one wins and the other is refused. Runs decided before this
-- migration keep NULL (their state says what became of them).
ALTER TABLE runs ADD COLUMN decision TEXT;
