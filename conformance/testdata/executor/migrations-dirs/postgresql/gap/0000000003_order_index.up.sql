-- +ptah no_transaction
CREATE INDEX products_sku ON products (sku);
