"""Finding engines: the scanner and its stages, and the watch that turns scans into events."""
