CREATE TABLE products (id integer PRIMARY KEY, sku varchar(64) NOT NULL);
