DROP INDEX products_sku;
