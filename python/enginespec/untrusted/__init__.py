"""The rules for what enginespec reads and writes on a shared host: documents parsed with
limits, secrets masked, files written safely, and one engine's failure kept its own."""
