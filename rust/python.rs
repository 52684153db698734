//! The only PyO3 file: thin bindings over the pure Rust modules.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::matcher;
use crate::scan;
use crate::scan_sysinfo::SysinfoScanner;

/// (engine index, model, served names, host, port), the shape `_pymatcher.Matcher.parse` returns.
type RawInvocation = (
    usize,
    Option<OsString>,
    Vec<OsString>,
    Option<OsString>,
    Option<u16>,
);

fn os(bytes: &[u8]) -> OsString {
    OsStr::from_bytes(bytes).to_os_string()
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

    fn engines(&self) -> Vec<String> {
        self.inner.engines()
    }

    /// Strings arrive as bytes through the filesystem encoding (surrogateescape), so argv read
    /// from `/proc` with invalid UTF-8 round-trips losslessly, as with `os.fsencode`.
    fn parse(&self, argv: Vec<OsString>) -> Option<RawInvocation> {
        let tokens: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        self.inner.parse(&tokens).map(|p| {
            (
                p.engine,
                p.model.map(os),
                p.served_names.into_iter().map(os).collect(),
                p.host.map(os),
                p.port,
            )
        })
    }
}

/// (engine index, model, served names, host, port) of a scanned engine.
type RawFacts = (
    usize,
    Option<OsString>,
    Vec<OsString>,
    Option<OsString>,
    Option<u16>,
);

/// (pid, start time, ppid, argv, facts, exe, descendants, parent argv, listen ports): the shape
/// `_pyscanner.Scanner.scan` returns.
type RawProcess = (
    i32,
    f64,
    i32,
    Vec<OsString>,
    RawFacts,
    Option<OsString>,
    Vec<i32>,
    Vec<OsString>,
    Vec<u16>,
);

fn raw_process(p: scan::EngineProc) -> RawProcess {
    let owned = |v: Vec<u8>| OsString::from_vec(v);
    (
        p.pid,
        p.start_time,
        p.ppid,
        p.argv.into_iter().map(owned).collect(),
        (
            p.engine,
            p.model.map(owned),
            p.served_names.into_iter().map(owned).collect(),
            p.host.map(owned),
            p.port,
        ),
        p.exe.map(owned),
        p.descendants,
        p.parent_argv.into_iter().map(owned).collect(),
        p.listen_ports,
    )
}

/// Where the native scanner reads processes from.
enum Source {
    /// Linux: the incremental `/proc` reader.
    Procfs(Box<scan::Scanner>),
    /// Elsewhere: the `sysinfo` crate.
    Sysinfo(Box<SysinfoScanner>),
}

impl Source {
    fn scan(&mut self) -> Vec<scan::EngineProc> {
        match self {
            Source::Procfs(s) => s.scan(),
            Source::Sysinfo(s) => s.scan(),
        }
    }

    fn stats(&self) -> (scan::ScanStats, usize) {
        match self {
            Source::Procfs(s) => (s.stats(), s.known_len()),
            Source::Sysinfo(s) => (s.stats(), s.known_len()),
        }
    }
}

/// The incremental process scanner; the GIL is released for the whole walk.
#[pyclass(frozen, module = "enginespec._native")]
struct Scanner {
    inner: Mutex<Source>,
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
        let young = Duration::try_from_secs_f64(young_seconds).map_err(|_| {
            PyValueError::new_err(format!("young_seconds: invalid {young_seconds}"))
        })?;
        let refresh = Duration::try_from_secs_f64(refresh_seconds).map_err(|_| {
            PyValueError::new_err(format!("refresh_seconds: invalid {refresh_seconds}"))
        })?;
        let options = scan::ScanOptions {
            wrappers: wrappers.into_iter().map(OsString::into_vec).collect(),
            young,
            refresh,
            listen_ports,
            ..scan::ScanOptions::default()
        };
        let default = if cfg!(target_os = "linux") {
            "procfs"
        } else {
            "sysinfo"
        };
        let inner = match source.unwrap_or(default) {
            "procfs" => Source::Procfs(Box::new(
                scan::Scanner::new(&signatures, options).map_err(PyValueError::new_err)?,
            )),
            "sysinfo" => Source::Sysinfo(Box::new(
                SysinfoScanner::new(&signatures).map_err(PyValueError::new_err)?,
            )),
            other => {
                return Err(PyValueError::new_err(format!(
                    "source: {other:?} is not 'procfs' or 'sysinfo'"
                )))
            }
        };
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
        let (s, known) = scanner.stats();
        Ok((
            s.scanned,
            s.new,
            s.vanished,
            s.unreadable,
            s.reread,
            s.full_recheck,
            known,
        ))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Matcher>()?;
    m.add_class::<Scanner>()?;
    Ok(())
}
