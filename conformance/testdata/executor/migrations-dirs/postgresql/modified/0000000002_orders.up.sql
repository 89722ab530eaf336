CREATE TABLE orders (id integer PRIMARY KEY);
ALTER TABLE orders ADD COLUMN product_id integer;
-- orders, again
