//! The JSON form of an engine signature, as written by `enginespec.signature.signatures_json`.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// What a process is to its engine (`enginespec.signature.Role`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serves the HTTP API.
    #[default]
    Server,
    /// A per-model child of a supervising server.
    Runner,
    /// A multi-node or data-parallel worker that serves no HTTP API.
    Follower,
    /// A worker that retitled itself (`Signature::worker_titles`); never a launch form's role.
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Runner => "runner",
            Role::Follower => "follower",
            Role::Worker => "worker",
        }
    }
}

/// What argv must also show before a launch form counts (`enginespec.signature.Evidence`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    #[serde(default)]
    pub model_suffixes: Vec<String>,
    #[serde(default)]
    pub any_flags: Vec<String>,
    #[serde(default)]
    pub positionals: Vec<String>,
}

/// One way an engine's server is launched (executables or `python -m` modules + subcommand).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchForm {
    #[serde(default)]
    pub executables: Vec<String>,
    #[serde(default)]
    pub executable_prefixes: Vec<String>,
    #[serde(default)]
    pub executable_suffixes: Vec<String>,
    #[serde(default)]
    pub modules: Vec<String>,
    #[serde(default)]
    pub loaders: Vec<String>,
    #[serde(default)]
    pub loader_prefixes: Vec<String>,
    #[serde(default)]
    pub directories: Vec<String>,
    #[serde(default)]
    pub subcommand: Vec<String>,
    #[serde(default)]
    pub other_subcommands: Vec<String>,
    #[serde(default)]
    pub positional_model: bool,
    #[serde(default)]
    pub positional_port: bool,
    #[serde(default)]
    pub program_model: bool,
    #[serde(default)]
    pub exit_subcommands: Vec<String>,
    #[serde(default)]
    pub no_arguments: bool,
    #[serde(default)]
    pub max_positionals: Option<usize>,
    #[serde(default)]
    pub any_program: bool,
    #[serde(default = "yes")]
    pub facts: bool,
    #[serde(default)]
    pub host_flags: Vec<String>,
    #[serde(default)]
    pub port_flags: Vec<String>,
    #[serde(default)]
    pub evidence: Option<Evidence>,
    #[serde(default)]
    pub leading_flags: Vec<String>,
    #[serde(default)]
    pub leading_switches: Vec<String>,
    #[serde(default)]
    pub role: Role,
    /// Read by the facade (its checkout test, a follower's default address), not by the matcher.
    #[serde(default, rename = "checkout_files")]
    _checkout_files: IgnoredAny,
    #[serde(default, rename = "listen_default")]
    _listen_default: IgnoredAny,
}

fn yes() -> bool {
    true
}

/// Where one engine's facts sit in argv. Field meanings are documented on the Python model.
/// Every field the Python model writes is named here (a field added there and forgotten here is
/// an error, not a silent difference between the two matchers).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub address_flags: Vec<String>,
    #[serde(default)]
    pub no_value_flags: Vec<String>,
    #[serde(default)]
    pub no_value_prefixes: Vec<String>,
    #[serde(default)]
    pub multi_value_flags: Vec<String>,
    #[serde(default)]
    pub exit_flags: Vec<String>,
    #[serde(default)]
    pub exit_values: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub mode_flags: BTreeMap<String, bool>,
    #[serde(default)]
    pub modeless_exit_flags: Vec<String>,
    #[serde(default)]
    pub follower_flags: Vec<String>,
    #[serde(default)]
    pub follower_rank_flags: Vec<String>,
    #[serde(default)]
    pub fold_workers: bool,
    #[serde(default)]
    pub worker_titles: Vec<String>,
    #[serde(default)]
    pub values_required: bool,
    /// Read by the facade (`process/argv.py`: secrets, abbreviations, defaults), not by the
    /// matcher.
    #[serde(default, rename = "abbreviations")]
    _abbreviations: IgnoredAny,
    #[serde(default, rename = "secret_flags")]
    _secret_flags: IgnoredAny,
    #[serde(default, rename = "default_host")]
    _default_host: IgnoredAny,
    #[serde(default, rename = "default_port")]
    _default_port: IgnoredAny,
    #[serde(default, rename = "model_is_served_name")]
    _model_is_served_name: IgnoredAny,
}

impl Signature {
    /// The canonical name of a flag as written (`--max_model_len` -> `--max-model-len`, aliases
    /// resolved), as `Signature.canonical` in Python.
    pub fn canonical(&self, flag: &str) -> String {
        let flag = if self.underscore_is_dash && flag.starts_with("--") {
            flag.replace('_', "-")
        } else {
            flag.to_owned()
        };
        self.aliases.get(&flag).cloned().unwrap_or(flag)
    }
}

/// Parses the JSON list of signatures.
pub fn signatures_from_json(json: &str) -> Result<Vec<Signature>, String> {
    serde_json::from_str(json).map_err(|err| format!("invalid signatures JSON: {err}"))
}
