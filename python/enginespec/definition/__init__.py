"""What an engine is, as data: the signature its processes are recognised by, the definition's
records and hooks, the registry of built-in and plugin engines, version specifiers and which
interpreter or binary launches it. Nothing here reads the host."""
