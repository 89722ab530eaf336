CREATE TABLE orders (id integer PRIMARY KEY);
