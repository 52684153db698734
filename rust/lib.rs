//! Engine-agnostic core of enginespec.
//!
//! Engines are described by signatures (data, owned by the Python engine modules); this crate
//! compiles them into a [`Matcher`] and applies it to argv. It knows nothing about any engine.
//! Everything but `python.rs` is plain Rust that `cargo test` exercises without an interpreter:
//!
//! - `signature`: the JSON form of the signatures; `matcher`: argv -> [`Facts`];
//! - `cgroup`: the container `/proc/PID/cgroup` places a process in (a pure parser); `proxy`:
//!   the forward a `docker-proxy` argv sets up;
//! - `procfs`: pure parsers of what procfs gives (`cmdline`, `stat`, `children`, `net/tcp`, the
//!   listing's records); `procread`: every read of procfs, under one root (`/proc`, or a fixture
//!   host's), whose bytes `procfs` parses;
//! - `namedfiles`: files a process names (its checkout), looked at as its owner, inside its
//!   root, under a deadline;
//! - `gguf`: the header of a GGUF model file (metadata and tensor infos), bounded reads;
//! - `proc_events`: the kernel's process events (netlink proc connector), parsed and read as
//!   hints of what to re-read;
//! - `scan`: the incremental `/proc` scanner; `scan_sysinfo`: the same over the `sysinfo` crate,
//!   where there is no procfs; `backend`: [`ProcessScanner`], either one chosen by name;
//! - `python` (feature `python`): the PyO3 bindings, type conversions only.

pub mod backend;
pub mod cgroup;
pub mod gguf;
pub mod matcher;
#[cfg(target_os = "linux")]
pub mod namedfiles;
pub mod proc_events;
pub mod procfs;
pub mod procread;
pub mod proxy;
pub mod scan;
pub mod scan_sysinfo;
pub mod signature;

#[cfg(feature = "python")]
mod python;

pub use backend::ProcessScanner;
pub use matcher::{Facts, Matcher, Parsed};
pub use signature::{LaunchForm, Signature};
