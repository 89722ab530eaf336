INSERT INTO customers (id, email) VALUES (1, 'a@example.com');
INSERT INTO customers (id, email) VALUES (2, 'a@example.com');
CREATE UNIQUE INDEX customers_email ON customers (email);
