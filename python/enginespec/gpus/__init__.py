"""Which GPUs a host has and which processes hold them: the reader, one module per vendor behind
one protocol (vendor.py), NVIDIA's library, and the ids that name a device."""
