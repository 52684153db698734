"""Engines seen from elsewhere: the Prometheus exporter, discovery feeds, the read-only agent and
its clients (``ps``/``watch --remote``), and what each may be shown."""
