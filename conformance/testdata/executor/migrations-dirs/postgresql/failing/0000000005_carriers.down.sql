DROP TABLE carriers;
