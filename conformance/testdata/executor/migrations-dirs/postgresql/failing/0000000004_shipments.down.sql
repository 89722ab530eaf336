DROP TABLE shipments;
