//! The only PyO3 file: thin bindings over the pure Rust modules. It converts types, maps errors
//! to Python exceptions and releases the GIL; every decision is made in plain Rust.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::backend::ProcessScanner;
use crate::matcher;
use crate::scan;

/// (engine index, model, served names, host, port, role), the shape `_pymatcher.Matcher.parse`
/// returns, and the facts inside each scanned process. The role is `"server"`, `"runner"` or
/// `"follower"`.
type RawInvocation = (
    usize,
    Option<OsString>,
    Vec<OsString>,
    Option<OsString>,
    Option<u16>,
    &'static str,
);

fn os(bytes: Vec<u8>) -> OsString {
    OsString::from_vec(bytes)
}

fn raw_invocation(facts: matcher::Facts) -> RawInvocation {
    (
        facts.engine,
        facts.model.map(os),
        facts.served_names.into_iter().map(os).collect(),
        facts.host.map(os),
        facts.port,
        facts.role.as_str(),
    )
}

/// Engine signatures compiled once; classifies argv.
#[pyclass(frozen, module = "enginespec._native")]
struct Matcher {
    inner: matcher::Matcher,
}

#[pymethods]
impl Matcher {
    #[new]
    fn new(signatures_json: &str) -> PyResult<Self> {
        matcher::Matcher::from_json(signatures_json)
            .map(|inner| Matcher { inner })
            .map_err(PyValueError::new_err)
    }

    /// Strings arrive as bytes through the filesystem encoding (surrogateescape), so argv read
    /// from `/proc` with invalid UTF-8 round-trips losslessly, as with `os.fsencode`.
    fn parse(&self, argv: Vec<OsString>) -> Option<RawInvocation> {
        let tokens: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        self.inner
            .parse(&tokens)
            .map(|p| raw_invocation(p.to_facts()))
    }
}

/// (pid, start time, ppid, argv, facts, exe, descendants, parent argv, listen ports): the shape
/// `_pyscanner.Scanner.scan` returns.
type RawProcess = (
    i32,
    f64,
    i32,
    Vec<OsString>,
    RawInvocation,
    Option<OsString>,
    Vec<i32>,
    Vec<OsString>,
    Vec<u16>,
);

fn raw_process(p: scan::EngineProc) -> RawProcess {
    (
        p.pid,
        p.start_time,
        p.ppid,
        p.argv.into_iter().map(os).collect(),
        raw_invocation(p.facts),
        p.exe.map(os),
        p.descendants,
        p.parent_argv.into_iter().map(os).collect(),
        p.listen_ports,
    )
}

/// A duration given in seconds; negative, NaN and infinite values are refused, naming the field.
fn seconds(field: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{field}: invalid {value}")))
}

/// The incremental process scanner; the GIL is released for the whole walk.
#[pyclass(frozen, module = "enginespec._native")]
struct Scanner {
    inner: Mutex<ProcessScanner>,
}

#[pymethods]
impl Scanner {
    /// `source` is `"procfs"` (Linux's default), or `"sysinfo"` (the default elsewhere).
    #[new]
    #[pyo3(signature = (signatures_json, wrappers, young_seconds, refresh_seconds, listen_ports, source=None))]
    fn new(
        signatures_json: &str,
        wrappers: Vec<OsString>,
        young_seconds: f64,
        refresh_seconds: f64,
        listen_ports: bool,
        source: Option<&str>,
    ) -> PyResult<Self> {
        let signatures = crate::signature::signatures_from_json(signatures_json)
            .map_err(PyValueError::new_err)?;
        let options = scan::ScanOptions {
            wrappers: wrappers.into_iter().map(OsString::into_vec).collect(),
            young: seconds("young_seconds", young_seconds)?,
            refresh: seconds("refresh_seconds", refresh_seconds)?,
            listen_ports,
            ..scan::ScanOptions::default()
        };
        let inner =
            ProcessScanner::new(&signatures, options, source).map_err(PyValueError::new_err)?;
        Ok(Scanner {
            inner: Mutex::new(inner),
        })
    }

    fn scan(&self, py: Python<'_>) -> PyResult<Vec<RawProcess>> {
        let found = py.detach(|| {
            self.inner
                .lock()
                .map(|mut scanner| scanner.scan())
                .map_err(|_| "scanner state poisoned by an earlier panic")
        });
        let found = found.map_err(PyRuntimeError::new_err)?;
        Ok(found.into_iter().map(raw_process).collect())
    }

    /// (scanned, new, vanished, unreadable, reread, full_recheck, known) of the last scan.
    fn stats(&self) -> PyResult<(u64, u64, u64, u64, u64, bool, usize)> {
        let scanner = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("scanner state poisoned"))?;
        let s = scanner.stats();
        Ok((
            s.scanned,
            s.new,
            s.vanished,
            s.unreadable,
            s.reread,
            s.full_recheck,
            scanner.known_len(),
        ))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Matcher>()?;
    m.add_class::<Scanner>()?;
    Ok(())
}
