CREATE TABLE shipments (id integer PRIMARY KEY);
