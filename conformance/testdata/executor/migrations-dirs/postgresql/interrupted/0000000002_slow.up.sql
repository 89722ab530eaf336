-- +ptah no_transaction
CREATE TABLE t2 (id integer);
SELECT pg_sleep(5);
CREATE TABLE t3 (id integer);
