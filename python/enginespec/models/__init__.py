"""Model files and what they say (architecture, sizes, context), the model a process serves, the
names it is shown by, and whether it fits on a host's GPUs."""
