"""The pure-Python backend: one module per Rust file it mirrors (``matcher.rs``, ``scan.rs``,
``procfs.rs``, ``procread.rs``, ``scan_sysinfo.rs``, ``cgroup.rs``, ``proxy.rs``, ``gguf.rs``), with the
same results. Only ``enginespec._host.backend`` imports them."""
