"""Which GPUs a host has and which processes hold them: the reader, its vendors' libraries and
files, and the ids that tie a device to a process."""
