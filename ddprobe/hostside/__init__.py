"""Programs that run on the host (standard library only, Python 3.8+), and their one client."""
