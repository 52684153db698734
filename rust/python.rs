//! The only PyO3 file: thin bindings over the pure Rust modules.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::matcher;

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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Matcher>()?;
    Ok(())
}
