//! The JSON form of an engine signature, as written by `enginespec.signature.signatures_json`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One way an engine's server is launched (executables or `python -m` modules + subcommand).
#[derive(Debug, Clone, Deserialize)]
pub struct LaunchForm {
    #[serde(default)]
    pub executables: Vec<String>,
    #[serde(default)]
    pub modules: Vec<String>,
    #[serde(default)]
    pub subcommand: Vec<String>,
    #[serde(default)]
    pub positional_model: bool,
}

/// Where one engine's facts sit in argv. Field meanings are documented on the Python model.
#[derive(Debug, Clone, Deserialize)]
pub struct Signature {
    pub engine: String,
    pub launch_forms: Vec<LaunchForm>,
    #[serde(default)]
    pub underscore_is_dash: bool,
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    #[serde(default)]
    pub model_flags: Vec<String>,
    #[serde(default)]
    pub served_name_flags: Vec<String>,
    #[serde(default)]
    pub served_name_separator: Option<String>,
    #[serde(default)]
    pub host_flags: Vec<String>,
    #[serde(default)]
    pub port_flags: Vec<String>,
    #[serde(default)]
    pub no_value_flags: Vec<String>,
    #[serde(default)]
    pub no_value_prefixes: Vec<String>,
    #[serde(default)]
    pub multi_value_flags: Vec<String>,
    #[serde(default)]
    pub exit_flags: Vec<String>,
    #[serde(default)]
    pub fold_workers: bool,
}

/// Parses the JSON list of signatures.
pub fn signatures_from_json(json: &str) -> Result<Vec<Signature>, String> {
    serde_json::from_str(json).map_err(|err| format!("invalid signatures JSON: {err}"))
}
