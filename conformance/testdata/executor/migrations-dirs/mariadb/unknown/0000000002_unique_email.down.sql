DROP INDEX customers_email ON customers;
