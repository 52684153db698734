"""One engine process as enginespec sees it: the record, its argv and settings, its container
and sockets, whether it still runs, and the addresses it can be reached at."""
