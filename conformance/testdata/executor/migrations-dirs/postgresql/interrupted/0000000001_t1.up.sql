CREATE TABLE t1 (id integer);
