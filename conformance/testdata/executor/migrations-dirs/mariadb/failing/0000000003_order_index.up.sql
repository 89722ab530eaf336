-- +ptah no_transaction
CREATE INDEX orders_product ON orders (product_id);
