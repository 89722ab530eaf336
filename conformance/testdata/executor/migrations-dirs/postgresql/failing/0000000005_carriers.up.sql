CREATE TABLE carriers (id integer PRIMARY KEY);
INSERT INTO carriers (id) VALUES (1);
INSERT INTO carriers (id) VALUES (2), (1);
