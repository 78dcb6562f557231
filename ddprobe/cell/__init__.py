"""One cell: restart the server with one configuration, probe it, classify what happened."""
