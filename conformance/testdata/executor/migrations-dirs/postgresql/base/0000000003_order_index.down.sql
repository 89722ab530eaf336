DROP INDEX orders_product;
