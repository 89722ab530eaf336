CREATE TABLE customers (id integer PRIMARY KEY, email varchar(100) NOT NULL) ENGINE=InnoDB;
