//! The only PyO3 file: thin bindings over the pure Rust modules. It converts types, maps errors
//! to Python exceptions and releases the GIL; every decision is made in plain Rust.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
#[cfg(unix)]
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use rustc_hash::FxHashMap;

use crate::backend::{ProcessScanner, Woke};
use crate::gguf;
use crate::matcher;
use crate::proc_events::Change;
use crate::procread::{OpenDevice, ProcRoot};
use crate::scan;

/// Bytes as `str` through the filesystem encoding (surrogateescape), as `os.fsdecode` gives them.
#[cfg(unix)]
fn os(bytes: &[u8]) -> Cow<'_, OsStr> {
    Cow::Borrowed(OsStr::from_bytes(bytes))
}

/// Off Unix, argv is text: bytes that are not UTF-8 are replaced.
#[cfg(not(unix))]
fn os(bytes: &[u8]) -> Cow<'_, OsStr> {
    Cow::Owned(OsString::from(String::from_utf8_lossy(bytes).into_owned()))
}

fn strings<'py>(py: Python<'py>, items: &[Vec<u8>]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, items.iter().map(|item| os(item)))
}

/// The records the boundary carries are the named tuples of `enginespec._host.shapes`, declared
/// once there, so both backends give the same records, read by name.
static RAW_INVOCATION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static RAW_PROCESS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LISTENING: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ENVIRON: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static RAW_STATS: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A `_host.shapes.RawInvocation` (engine index, model, served names, host, port, role), as
/// `_host.fallback.matcher.Matcher.parse` returns it, and the facts inside each scanned process.
/// The role is `"server"`, `"runner"` or `"follower"`.
fn raw_invocation<'py>(py: Python<'py>, facts: &matcher::Facts) -> PyResult<Bound<'py, PyAny>> {
    let fields = (
        facts.engine,
        facts.model.as_deref().map(os),
        strings(py, &facts.served_names)?,
        facts.host.as_deref().map(os),
        facts.port,
        facts.role.as_str(),
    );
    RAW_INVOCATION
        .import(py, "enginespec._host.shapes", "RawInvocation")?
        .call1(fields)
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
    fn parse<'py>(
        &self,
        py: Python<'py>,
        argv: Vec<OsString>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let tokens: Vec<&[u8]> = argv.iter().map(|a| a.as_encoded_bytes()).collect();
        self.inner
            .parse(&tokens)
            .map(|p| raw_invocation(py, &p.to_facts()))
            .transpose()
    }
}

/// A `_host.shapes.Environ` (the variables as `(name, value)` pairs, whether the read was cut).
fn environ<'py>(py: Python<'py>, found: &scan::Environ) -> PyResult<Bound<'py, PyAny>> {
    let vars = PyList::new(
        py,
        found.vars.iter().map(|(name, value)| (os(name), os(value))),
    )?;
    ENVIRON
        .import(py, "enginespec._host.shapes", "Environ")?
        .call1((vars, found.cut))
}

/// A `_host.shapes.ReadSet`, read by its fields' names.
#[derive(FromPyObject)]
struct ReadSetArg {
    #[pyo3(attribute)]
    environ: Vec<Vec<OsString>>,
    #[pyo3(attribute)]
    cgroup: bool,
    #[pyo3(attribute)]
    netns: bool,
    #[pyo3(attribute)]
    checkouts: Vec<FxHashMap<OsString, Vec<OsString>>>,
    #[pyo3(attribute)]
    devices: bool,
}

impl ReadSetArg {
    fn into_read_set(self) -> scan::ReadSet {
        scan::ReadSet {
            environ: self
                .environ
                .into_iter()
                .map(|names| {
                    names
                        .into_iter()
                        .map(OsString::into_encoded_bytes)
                        .collect()
                })
                .collect(),
            cgroup: self.cgroup,
            netns: self.netns,
            checkouts: self
                .checkouts
                .into_iter()
                .map(|programs| {
                    programs
                        .into_iter()
                        .map(|(program, files)| {
                            let files = files.into_iter().map(OsString::into_encoded_bytes);
                            (program.into_encoded_bytes(), files.collect())
                        })
                        .collect()
                })
                .collect(),
            devices: self.devices,
        }
    }
}

/// A `_host.shapes.RawProcess` (pid, start time, ppid, argv, facts, exe, descendants, parent argv,
/// listen ports, and its read set's environ, cgroup, netns, checkout and devices), as
/// `_host.fallback.scan.ProcessScanner.scan` returns it.
fn raw_process<'py>(py: Python<'py>, p: &scan::EngineProc) -> PyResult<Bound<'py, PyAny>> {
    // By name: a field renamed or reordered on either side is an error, not a value in the
    // wrong place.
    let fields = PyDict::new(py);
    fields.set_item("pid", p.pid)?;
    fields.set_item("start_time", p.start_time)?;
    fields.set_item("ppid", p.ppid)?;
    fields.set_item("argv", strings(py, &p.argv)?)?;
    fields.set_item("facts", raw_invocation(py, &p.facts)?)?;
    fields.set_item("exe", p.exe.as_deref().map(os))?;
    fields.set_item("descendants", p.descendants.as_slice())?;
    fields.set_item("parent_argv", strings(py, &p.parent_argv)?)?;
    fields.set_item("listen_ports", p.listen_ports.as_slice())?;
    let environ = p.environ.as_ref().map(|e| environ(py, e)).transpose()?;
    fields.set_item("environ", environ)?;
    fields.set_item("cgroup", p.cgroup.as_deref().map(|c| PyBytes::new(py, c)))?;
    fields.set_item("netns", p.netns)?;
    fields.set_item("in_checkout", p.in_checkout)?;
    let devices = p.devices.as_ref().map(|held| {
        let by_pid = PyDict::new(py);
        held.iter()
            .try_for_each(|(pid, fds)| by_pid.set_item(pid, fds.as_slice()))
            .map(|()| by_pid)
    });
    fields.set_item("devices", devices.transpose()?)?;
    RAW_PROCESS
        .import(py, "enginespec._host.shapes", "RawProcess")?
        .call((), Some(&fields))
}

/// The facade's reads of sockets (who listens where: health checks, port conflicts, launches),
/// done by the scanner's own reading layer below one procfs root (`/proc`, or a fixture host's
/// `ROOT/proc`): the shape of `_host.fallback.procread.ProcRoot`'s methods of the same names.
#[pyclass(name = "ProcRoot", frozen)]
struct PyProcRoot {
    root: ProcRoot,
}

#[pymethods]
impl PyProcRoot {
    #[new]
    fn new(proc: PathBuf) -> Self {
        PyProcRoot {
            root: ProcRoot::new(proc),
        }
    }

    /// (pid, inode of `ROOT/PID`) of every process.
    fn list_pids(&self, py: Python<'_>) -> Vec<(i32, u64)> {
        let mut out = Vec::new();
        py.detach(|| self.root.list(&mut out));
        out
    }

    /// Every live descendant of the process, sorted.
    fn descendants(&self, py: Python<'_>, pid: i32) -> Vec<i32> {
        py.detach(|| self.root.descendants(pid))
    }

    /// The inode of the process's network namespace, `None` when it cannot be read.
    fn netns(&self, pid: i32) -> Option<u64> {
        self.root.netns(pid)
    }

    /// The socket inodes the process holds, `None` when its fds cannot be read.
    fn socket_inodes(&self, py: Python<'_>, pid: i32) -> Option<rustc_hash::FxHashSet<u64>> {
        py.detach(|| self.root.socket_inodes(pid).0)
    }

    /// The character devices among the process's open files as (fd, major, minor), sorted,
    /// `None` when its `fd/` cannot be listed; and whether some of it was refused.
    fn open_devices(&self, py: Python<'_>, pid: i32) -> (Option<Vec<OpenDevice>>, bool) {
        py.detach(|| {
            let (files, denied) = self.root.open_files(pid, true);
            (files.map(|files| files.devices), denied)
        })
    }

    /// The LISTEN sockets of the process's network namespace, as `_host.shapes.Listening` records.
    fn listen_table<'py>(&self, py: Python<'py>, pid: i32) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let (found, _denied) = py.detach(|| self.root.listen_table(pid));
        let listening = LISTENING.import(py, "enginespec._host.shapes", "Listening")?;
        found
            .into_iter()
            .map(|l| listening.call1((l.inode, pyo3::types::PyBytes::new(py, &l.address), l.port)))
            .collect()
    }
}

/// A duration given in seconds; negative, NaN and infinite values are refused, naming the field.
fn seconds(field: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{field}: invalid {value}")))
}

/// The signatures last compiled for a scanner, with the JSON they came from.
static COMPILED: Mutex<Option<(String, Arc<matcher::CompiledSignatures>)>> = Mutex::new(None);

/// `signatures_json` compiled, or the very same compilation as the scanner made before from the
/// same JSON (a new scanner of the same engines, as each `scan()` or command makes, skips parsing
/// and compiling them).
fn compiled(signatures_json: &str) -> Result<Arc<matcher::CompiledSignatures>, String> {
    let mut last = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((json, compiled)) = last.as_ref() {
        if json == signatures_json {
            return Ok(Arc::clone(compiled));
        }
    }
    let signatures = crate::signature::signatures_from_json(signatures_json)?;
    let compiled = matcher::CompiledSignatures::new(&signatures)?;
    *last = Some((signatures_json.to_owned(), Arc::clone(&compiled)));
    Ok(compiled)
}

/// The incremental process scanner; the GIL is released for the whole walk.
#[pyclass(frozen, name = "ProcessScanner", module = "enginespec._native")]
struct PyProcessScanner {
    inner: Mutex<ProcessScanner>,
    /// The tuple last returned for each engine, by pid, with the revision of the record it was
    /// built from. While the revision stays, the very same object is returned again: an unchanged
    /// engine costs no conversion whatever the size of its argv, and callers can tell it is
    /// unchanged by identity. An engine that is gone is dropped at the next scan.
    built: Mutex<FxHashMap<i32, (u64, Py<PyAny>)>>,
    /// See `ProcessScanner::boot_time`: fixed for the scanner's life, so read without the lock.
    boot_time: Option<f64>,
}

#[pymethods]
impl PyProcessScanner {
    /// `source` is `"procfs"` (Linux's default), or `"sysinfo"` (the default elsewhere).
    #[new]
    #[pyo3(signature = (signatures_json, wrappers, young_seconds, refresh_seconds, listen_ports, source=None, root=None, read_set=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        signatures_json: &str,
        wrappers: Vec<OsString>,
        young_seconds: f64,
        refresh_seconds: f64,
        listen_ports: bool,
        source: Option<&str>,
        root: Option<PathBuf>,
        read_set: Option<ReadSetArg>,
    ) -> PyResult<Self> {
        let compiled = compiled(signatures_json).map_err(PyValueError::new_err)?;
        if root.is_some() && source == Some("sysinfo") {
            return Err(PyValueError::new_err(
                "root: the sysinfo source reads the live host only",
            ));
        }
        let options = scan::ScanOptions {
            wrappers: wrappers
                .into_iter()
                .map(OsString::into_encoded_bytes)
                .collect(),
            young: seconds("young_seconds", young_seconds)?,
            refresh: seconds("refresh_seconds", refresh_seconds)?,
            listen_ports,
            proc_root: root.map_or_else(|| PathBuf::from("/proc"), |root| root.join("proc")),
            read_set: read_set.map(ReadSetArg::into_read_set).unwrap_or_default(),
        };
        let inner =
            ProcessScanner::compiled(compiled, options, source).map_err(PyValueError::new_err)?;
        Ok(PyProcessScanner {
            boot_time: inner.boot_time(),
            inner: Mutex::new(inner),
            built: Mutex::new(FxHashMap::default()),
        })
    }

    /// The boot time (epoch seconds) every start time is computed from, `None` when start times
    /// have no clock ticks behind them (the sysinfo source).
    #[getter]
    fn boot_time(&self) -> Option<f64> {
        self.boot_time
    }

    fn scan(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        self.scan_with(py, ProcessScanner::scan)
    }

    /// `scan` as if `elapsed` seconds had passed since the scanner was made (see
    /// `ProcessScanner::scan_at`): a fixture host's clock.
    fn scan_at(&self, py: Python<'_>, elapsed: f64) -> PyResult<Vec<Py<PyAny>>> {
        let elapsed = seconds("elapsed", elapsed)?;
        self.scan_with(py, |scanner| scanner.scan_at(elapsed))
    }

    /// Subscribes to the kernel's process events (see `ProcessScanner::subscribe_events`):
    /// `None` when they drive the scans from now on, else why not (the scanner then polls).
    fn subscribe_events(
        &self,
        py: Python<'_>,
        ack_timeout: f64,
        full_rescan_seconds: f64,
    ) -> PyResult<Option<String>> {
        let ack_timeout = seconds("ack_timeout", ack_timeout)?;
        let full_every = seconds("full_rescan_seconds", full_rescan_seconds)?;
        let subscribed = py.detach(|| {
            self.inner
                .lock()
                .map(|mut scanner| scanner.subscribe_events(ack_timeout, full_every))
                .map_err(|_| "scanner state poisoned by an earlier panic")
        });
        Ok(subscribed
            .map_err(PyRuntimeError::new_err)?
            .err()
            .map(|why| why.to_string()))
    }

    /// The engines after waiting up to `timeout` seconds (see `ProcessScanner::wait`), and what
    /// woke the scanner: `"polled"`, `"events"`, `"tick"`, `"rescan"` or `"fallback"`.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<(Vec<Py<PyAny>>, &'static str)> {
        let timeout = seconds("timeout", timeout)?;
        let found = py.detach(|| {
            self.inner
                .lock()
                .map(|mut scanner| scanner.wait(timeout))
                .map_err(|_| "scanner state poisoned by an earlier panic")
        });
        let (found, woke) = found.map_err(PyRuntimeError::new_err)?;
        let woke = match woke {
            Woke::Polled => "polled",
            Woke::Events => "events",
            Woke::Tick => "tick",
            Woke::Rescan => "rescan",
            Woke::Fallback => "fallback",
        };
        Ok((self.convert(py, found)?, woke))
    }

    /// Process events given by the caller instead of the kernel (a fixture host's, which no
    /// file can hold; see `Scanner::set_event_driven`): nothing is watched for an exec from now
    /// on. Raises `ValueError` for the sysinfo source.
    fn set_event_driven(&self, py: Python<'_>) -> PyResult<()> {
        self.with_procfs(py, |scanner| scanner.set_event_driven())
    }

    /// Back to polling: everything is forgotten (`Scanner::set_polling`).
    fn set_polling(&self, py: Python<'_>) -> PyResult<()> {
        self.with_procfs(py, |scanner| scanner.set_polling())
    }

    /// Reads again the processes the events name, in order (`Scanner::apply_events`); each
    /// change is `"forked"`, `"exec"`, `"comm"` or `"exited"`. Whether an engine appeared,
    /// changed or is gone, or a folded worker exited.
    fn apply_events(&self, py: Python<'_>, changes: Vec<(i32, String)>) -> PyResult<bool> {
        let changes = changes
            .into_iter()
            .map(|(pid, change)| {
                let change = match change.as_str() {
                    "forked" => Change::Forked,
                    "exec" => Change::Exec,
                    "comm" => Change::Comm,
                    "exited" => Change::Exited,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "changes: unknown change '{}' of pid {pid}",
                            change.escape_debug()
                        )))
                    }
                };
                Ok((pid, change))
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.with_procfs(py, |scanner| scanner.apply_events(&changes))
    }

    /// The engines after the events applied since the last call
    /// (`Scanner::scan_after_events`): with `recheck`, a scan without listing.
    fn scan_after_events(&self, py: Python<'_>, recheck: bool) -> PyResult<Vec<Py<PyAny>>> {
        let found = self.with_procfs(py, |scanner| scanner.scan_after_events(recheck))?;
        self.convert(py, found)
    }

    /// A `shapes.RawStats` (scanned, new, vanished, unreadable, restricted, reread,
    /// full_recheck, known) of the last scan.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // Another thread may hold the lock for a whole `wait`: wait for it with the GIL released,
        // or that thread could never take the GIL back to return.
        let scanner = self
            .inner
            .lock_py_attached(py)
            .map_err(|_| PyRuntimeError::new_err("scanner state poisoned"))?;
        let s = scanner.stats();
        let fields = (
            s.scanned,
            s.new,
            s.vanished,
            s.unreadable,
            s.restricted,
            s.reread,
            s.full_recheck,
            scanner.known_len(),
        );
        RAW_STATS
            .import(py, "enginespec._host.shapes", "RawStats")?
            .call1(fields)
    }
}

impl PyProcessScanner {
    /// Runs one scan with the GIL released and converts what it found.
    fn scan_with(
        &self,
        py: Python<'_>,
        run: impl FnOnce(&mut ProcessScanner) -> Vec<std::sync::Arc<scan::EngineProc>> + Send,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let found = py.detach(|| {
            self.inner
                .lock()
                .map(|mut scanner| run(&mut scanner))
                .map_err(|_| "scanner state poisoned by an earlier panic")
        });
        self.convert(py, found.map_err(PyRuntimeError::new_err)?)
    }

    /// Runs `run` on the procfs scanner with the GIL released; `ValueError` for the sysinfo
    /// source, which has no event mode.
    fn with_procfs<T: Send>(
        &self,
        py: Python<'_>,
        run: impl FnOnce(&mut scan::Scanner) -> T + Send,
    ) -> PyResult<T> {
        let done = py.detach(|| {
            self.inner
                .lock()
                .map_err(|_| "scanner state poisoned by an earlier panic")
                .map(|mut scanner| scanner.procfs().map(run))
        });
        done.map_err(PyRuntimeError::new_err)?
            .ok_or_else(|| PyValueError::new_err("source: the sysinfo source has no event mode"))
    }

    /// The records as `RawProcess` tuples; an engine whose record is unchanged gets the very
    /// same object.
    fn convert(
        &self,
        py: Python<'_>,
        found: Vec<std::sync::Arc<scan::EngineProc>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        // Waits with the GIL released, so a thread holding the lock can always take the GIL.
        let mut built = self
            .built
            .lock_py_attached(py)
            .map_err(|_| PyRuntimeError::new_err("scanner state poisoned"))?;
        let mut next = FxHashMap::default();
        next.reserve(found.len());
        let mut out = Vec::with_capacity(found.len());
        for record in found {
            let tuple = match built.remove(&record.pid) {
                Some((revision, tuple)) if revision == record.revision => tuple,
                _ => raw_process(py, &record)?.unbind(),
            };
            out.push(tuple.clone_ref(py));
            next.insert(record.pid, (record.revision, tuple));
        }
        *built = next;
        Ok(out)
    }
}

/// (runtime, id, pod uid) of the container the text of `/proc/PID/cgroup` names, or `None`:
/// the shape `_host.fallback.cgroup.parse_cgroup` returns.
#[pyfunction]
fn parse_cgroup(data: &[u8]) -> Option<(&'static str, String, Option<String>)> {
    crate::cgroup::parse_cgroup(data).map(|c| (c.runtime, c.id, c.pod_uid))
}

/// (host address, host port, container address, container port) a `docker-proxy` argv
/// forwards, or `None`: the shape `_host.fallback.proxy.proxy_flags` returns.
#[pyfunction]
fn proxy_flags(
    argv: Vec<OsString>,
) -> Option<(Cow<'static, OsStr>, u16, Cow<'static, OsStr>, u16)> {
    let tokens: Vec<&[u8]> = argv.iter().map(|a| a.as_encoded_bytes()).collect();
    crate::proxy::proxy_flags(&tokens).map(|f| {
        (
            Cow::Owned(os(&f.host_ip).into_owned()),
            f.host_port,
            Cow::Owned(os(&f.container_ip).into_owned()),
            f.container_port,
        )
    })
}

/// A GGUF metadata value as `_host.fallback.gguf` gives it: a long string as `("long", length)`,
/// an array as `(element type, length, items or None)`.
fn gguf_value<'py>(py: Python<'py>, value: &gguf::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        gguf::Value::Uint(v) => v.into_pyobject(py)?.into_any(),
        gguf::Value::Int(v) => v.into_pyobject(py)?.into_any(),
        gguf::Value::Float(v) => v.into_pyobject(py)?.into_any(),
        gguf::Value::Bool(v) => v.into_pyobject(py)?.to_owned().into_any(),
        gguf::Value::Str(v) => v.into_pyobject(py)?.into_any(),
        gguf::Value::LongStr(len) => ("long", len).into_pyobject(py)?.into_any(),
        gguf::Value::Array(elem, count, items) => {
            let items = match items {
                Some(items) => {
                    let list = PyList::empty(py);
                    for item in items {
                        list.append(gguf_value(py, item)?)?;
                    }
                    Some(list)
                }
                None => None,
            };
            (elem, count, items).into_pyobject(py)?.into_any()
        }
    })
}

/// (version, big endian, metadata, tensors, data offset) of the GGUF file open at `fd` (not
/// closed), the shape `_host.fallback.gguf.read_gguf` returns; the GIL is released while reading.
#[pyfunction]
fn read_gguf<'py>(
    py: Python<'py>,
    fd: i32,
    max_header_bytes: u64,
    max_string_bytes: u64,
    max_array_items: u64,
) -> PyResult<Bound<'py, PyTuple>> {
    let limits = gguf::Limits {
        max_header_bytes,
        max_string_bytes,
        max_array_items,
    };
    let header = py
        .detach(|| read_fd(fd, &limits))
        .map_err(PyValueError::new_err)?;
    let metadata = PyList::empty(py);
    for (key, t, value) in &header.metadata {
        metadata.append((key, t, gguf_value(py, value)?))?;
    }
    let tensors = PyList::empty(py);
    for t in &header.tensors {
        tensors.append((&t.name, t.ggml_type, t.dims.as_slice(), t.offset, t.bytes))?;
    }
    (
        header.version,
        header.big_endian,
        metadata,
        tensors,
        header.data_offset,
    )
        .into_pyobject(py)
}

#[cfg(unix)]
fn read_fd(fd: i32, limits: &gguf::Limits) -> Result<gguf::Header, String> {
    use std::os::fd::FromRawFd;
    if fd < 0 {
        return Err(format!("fd {fd}: not a file descriptor"));
    }
    // Borrowed: the caller owns the fd and closes it.
    // SAFETY: the fd is open for the duration of the call (the caller holds it); ManuallyDrop
    // keeps the File from closing it.
    let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    gguf::read_file(&file, limits)
}

#[cfg(not(unix))]
fn read_fd(_fd: i32, _limits: &gguf::Limits) -> Result<gguf::Header, String> {
    Err("reading a GGUF file by fd needs a Unix system".to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Matcher>()?;
    m.add_class::<PyProcessScanner>()?;
    m.add_class::<PyProcRoot>()?;
    m.add_function(wrap_pyfunction!(parse_cgroup, m)?)?;
    m.add_function(wrap_pyfunction!(proxy_flags, m)?)?;
    m.add_function(wrap_pyfunction!(read_gguf, m)?)?;
    Ok(())
}
