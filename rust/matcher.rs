//! Classifies argv against compiled engine signatures.
//!
//! The pure-Python twin is `python/enginespec/_host/fallback/matcher.py`; both implement the same
//! algorithm and must return the same result for every argv (a differential property test checks
//! it).
//! Tokens are bytes, so argv read from `/proc` with invalid UTF-8 is handled as is. No input may
//! panic: every index is bounds-checked and nothing is unwrapped.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

pub use crate::signature::Role;
use crate::signature::{signatures_from_json, Signature};

/// Most flags one fact (model, served name, host, port, rank) may be read from; keeps parsing free
/// of allocations. Signatures with more are refused when compiled.
pub const MAX_FACT_FLAGS: usize = 8;
/// Most distinct evidence flags of one engine: each is one bit of a word.
pub const MAX_EVIDENCE_FLAGS: usize = 64;

/// What argv says about one engine server. Values borrow from the argv they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// Index of the engine in the signature list the matcher was built from.
    pub engine: usize,
    pub model: Option<&'a [u8]>,
    pub served_names: Vec<&'a [u8]>,
    pub host: Option<&'a [u8]>,
    pub port: Option<u16>,
    pub role: Role,
}

/// [`Parsed`] owned, to outlive the argv it was read from (a scanned process's facts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub engine: usize,
    pub model: Option<Vec<u8>>,
    pub served_names: Vec<Vec<u8>>,
    pub host: Option<Vec<u8>>,
    pub port: Option<u16>,
    pub role: Role,
}

impl Parsed<'_> {
    pub fn to_facts(&self) -> Facts {
        Facts {
            engine: self.engine,
            model: self.model.map(<[u8]>::to_vec),
            served_names: self.served_names.iter().map(|n| n.to_vec()).collect(),
            host: self.host.map(<[u8]>::to_vec),
            port: self.port,
            role: self.role,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    None,
    One,
    Many,
}

/// A fact a flag carries, with the flag's priority among the flags carrying it.
#[derive(Debug, Clone, Copy)]
enum Fact {
    Model(usize),
    ServedName(usize),
    Host(usize),
    Port(usize),
    Address(usize),
    Rank(usize),
    Follower,
    /// A flag whose value may name an action that exits (`Signature::exit_values`).
    Action(usize),
}

/// Everything the parser needs to know about one spelling of a flag, resolved at compile time.
#[derive(Debug, Clone, Copy)]
struct FlagInfo {
    fact: Option<Fact>,
    arity: Arity,
    exit: bool,
    /// The mode the flag chooses (`Signature.mode_flags`): serve or not; the last one decides.
    mode: Option<bool>,
    /// Not serving unless a mode flag says so (`Signature.modeless_exit_flags`).
    modeless_exit: bool,
    /// The flag's bit among its engine's evidence flags, or 0.
    evidence: u64,
}

#[derive(Debug)]
struct CompiledEvidence {
    model_suffixes: Vec<Box<[u8]>>,
    /// Bits of the engine's evidence flags, one of which must be given (0: no such condition).
    any_flags: u64,
    /// One of argv's positional arguments must be one of these (empty: no such condition).
    positionals: Vec<Box<[u8]>>,
}

#[derive(Debug)]
struct CompiledForm {
    subcommand: Vec<Box<[u8]>>,
    /// Tokens that, right after the subcommand, name another command of the program.
    other_subcommands: Vec<Box<[u8]>>,
    positional_model: bool,
    positional_port: bool,
    program_model: bool,
    exit_subcommands: Vec<Box<[u8]>>,
    no_arguments: bool,
    /// More positional arguments than this is a usage error (a strict parser).
    max_positionals: Option<usize>,
    facts: bool,
    /// With `facts == false`: the program's own host and port flags, each taking the next token.
    host_flags: Vec<Box<[u8]>>,
    port_flags: Vec<Box<[u8]>>,
    loaders: Vec<Box<[u8]>>,
    loader_prefixes: Vec<Box<[u8]>>,
    /// Path components the program's directory must end with (any of them; none: anywhere).
    directories: Vec<Vec<Box<[u8]>>>,
    evidence: Option<CompiledEvidence>,
    role: Role,
    /// The program's global options before its subcommand, and what each takes.
    leading: Vec<(Box<[u8]>, Leading)>,
}

/// A global option before a form's subcommand (`LaunchForm.leading_flags`, `leading_switches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leading {
    Value,
    Switch,
    Exit,
}

/// Where a form's subcommand should be: past its leading global options; `None` when one of
/// them exits (`_past_leading` of the fallback).
fn leading_in<A: AsRef<[u8]>>(
    argv: &[A],
    start: usize,
    leading: &[(Box<[u8]>, Leading)],
) -> Option<usize> {
    let mut at = start;
    while let Some(token) = argv.get(at).map(AsRef::as_ref) {
        let (name, joined) = match token.iter().position(|&b| b == b'=') {
            Some(i) => (&token[..i], true),
            None => (token, false),
        };
        match leading
            .iter()
            .find(|(flag, _)| **flag == *name)
            .map(|&(_, kind)| kind)
        {
            Some(Leading::Exit) if !joined => return None,
            Some(Leading::Switch) if !joined => at += 1,
            Some(Leading::Value) => at += if joined { 1 } else { 2 },
            _ => break,
        }
    }
    Some(at)
}

/// The forms an executable basename may launch, and whether it is a loader of other programs.
#[derive(Debug, Default)]
struct Program {
    forms: Vec<(usize, usize)>,
    loader: bool,
}

#[derive(Debug)]
struct CompiledEngine {
    underscore_is_dash: bool,
    /// A one-value flag given no value is a usage error (clap), not a server.
    values_required: bool,
    /// Every spelling named by the signature (canonical names and aliases).
    flags: FxHashMap<Box<[u8]>, FlagInfo>,
    no_value_prefixes: Vec<Box<[u8]>>,
    served_separator: Option<Box<[u8]>>,
    /// The values of each `Fact::Action` flag that name an action that exits, by its slot.
    exit_values: Vec<Vec<Box<[u8]>>>,
    /// Canonical evidence flag -> its bit (see [`FlagInfo::evidence`]).
    evidence_bits: FxHashMap<String, u64>,
}

/// All engine signatures compiled into lookup tables; built once, shared by every scan.
#[derive(Debug)]
pub struct Matcher {
    engines: Vec<CompiledEngine>,
    forms: Vec<CompiledForm>,
    /// basename -> its (engine index, form index) in signature order, forms bound to a
    /// directory first; one lookup also says whether the name is a loader.
    by_executable: FxHashMap<Box<[u8]>, Program>,
    by_module: FxHashMap<Box<[u8]>, Vec<(usize, usize)>>,
    /// (executable prefix, engine index, form index) in signature order.
    by_prefix: Vec<(Box<[u8]>, usize, usize)>,
    /// (process title prefix, engine index) in signature order (`Signature::worker_titles`).
    worker_titles: Vec<(Box<[u8]>, usize)>,
    /// (executable suffix, engine index, form index) in signature order.
    by_suffix: Vec<(Box<[u8]>, usize, usize)>,
    loader_prefixes: Vec<Box<[u8]>>,
    /// (engine index, form index) of the forms whose loader's program may have any name.
    any_program: Vec<(usize, usize)>,
    /// First bytes of the program and loader prefixes, last bytes of the suffixes: one lookup
    /// rules them all out for almost every process.
    prefix_first: ByteSet,
    loader_first: ByteSet,
    suffix_last: ByteSet,
}

/// A set of bytes, for the one-lookup tests above.
#[derive(Debug)]
struct ByteSet([bool; 256]);

impl ByteSet {
    fn of<'n>(names: impl Iterator<Item = &'n [u8]>, pick: fn(&[u8]) -> Option<&u8>) -> Self {
        let mut set = [false; 256];
        for byte in names.filter_map(pick) {
            set[usize::from(*byte)] = true;
        }
        ByteSet(set)
    }

    fn has(&self, byte: Option<&u8>) -> bool {
        byte.is_some_and(|&b| self.0[usize::from(b)])
    }
}

fn boxed(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

/// (signature field, its flags in priority order, the fact they carry).
type FactGroup<'s> = (&'static str, &'s [String], fn(usize) -> Fact);

impl CompiledEngine {
    fn new(sig: &Signature) -> Result<Self, String> {
        let mut facts: FxHashMap<&str, Fact> = FxHashMap::default();
        let groups: [FactGroup; 6] = [
            ("model_flags", &sig.model_flags, Fact::Model),
            (
                "served_name_flags",
                &sig.served_name_flags,
                Fact::ServedName,
            ),
            ("host_flags", &sig.host_flags, Fact::Host),
            ("port_flags", &sig.port_flags, Fact::Port),
            ("address_flags", &sig.address_flags, Fact::Address),
            ("follower_rank_flags", &sig.follower_rank_flags, Fact::Rank),
        ];
        for (field, flags, make) in groups {
            if flags.len() > MAX_FACT_FLAGS {
                return Err(format!(
                    "{}: {field} lists {} flags, at most {MAX_FACT_FLAGS} are supported",
                    sig.engine,
                    flags.len()
                ));
            }
            for (priority, flag) in flags.iter().enumerate() {
                facts.entry(flag).or_insert(make(priority));
            }
        }
        for flag in &sig.follower_flags {
            facts.entry(flag).or_insert(Fact::Follower);
        }
        if sig.exit_values.len() > MAX_FACT_FLAGS {
            return Err(format!(
                "{}: exit_values lists {} flags, at most {MAX_FACT_FLAGS} are supported",
                sig.engine,
                sig.exit_values.len()
            ));
        }
        let mut exit_values = Vec::with_capacity(sig.exit_values.len());
        for (flag, values) in &sig.exit_values {
            if let Entry::Vacant(slot) = facts.entry(flag) {
                slot.insert(Fact::Action(exit_values.len()));
                exit_values.push(values.iter().map(|v| boxed(v)).collect());
            }
        }
        let mut evidence_bits: FxHashMap<String, u64> = FxHashMap::default();
        for evidence in sig.launch_forms.iter().filter_map(|f| f.evidence.as_ref()) {
            for flag in &evidence.any_flags {
                let next = evidence_bits.len();
                if let Entry::Vacant(slot) = evidence_bits.entry(sig.canonical(flag)) {
                    if next >= MAX_EVIDENCE_FLAGS {
                        return Err(format!(
                            "{}: more than {MAX_EVIDENCE_FLAGS} evidence flags are not supported",
                            sig.engine
                        ));
                    }
                    slot.insert(1u64 << next);
                }
            }
        }
        let no_value_prefixes: Vec<Box<[u8]>> =
            sig.no_value_prefixes.iter().map(|p| boxed(p)).collect();
        // Sets, not list scans: vLLM names hundreds of flags, and the signatures are compiled
        // on every cold start.
        fn set(names: &[String]) -> FxHashSet<&str> {
            names.iter().map(String::as_str).collect()
        }
        let (no_value, multi_value) = (set(&sig.no_value_flags), set(&sig.multi_value_flags));
        let (exits, modeless_exits) = (set(&sig.exit_flags), set(&sig.modeless_exit_flags));
        let info_of = |canonical: &str| FlagInfo {
            fact: facts.get(canonical).copied(),
            arity: if no_value.contains(canonical)
                || sig
                    .no_value_prefixes
                    .iter()
                    .any(|p| canonical.starts_with(p.as_str()))
            {
                Arity::None
            } else if multi_value.contains(canonical) {
                Arity::Many
            } else {
                Arity::One
            },
            exit: exits.contains(canonical),
            mode: sig.mode_flags.get(canonical).copied(),
            modeless_exit: modeless_exits.contains(canonical),
            evidence: evidence_bits.get(canonical).copied().unwrap_or(0),
        };
        let mut flags = FxHashMap::default();
        let named = facts
            .keys()
            .copied()
            .chain(sig.no_value_flags.iter().map(String::as_str))
            .chain(sig.multi_value_flags.iter().map(String::as_str))
            .chain(sig.exit_flags.iter().map(String::as_str))
            .chain(sig.mode_flags.keys().map(String::as_str))
            .chain(sig.modeless_exit_flags.iter().map(String::as_str))
            .chain(evidence_bits.keys().map(String::as_str))
            .chain(sig.aliases.values().map(String::as_str));
        for canonical in named {
            flags.insert(boxed(canonical), info_of(canonical));
        }
        for (spelling, canonical) in &sig.aliases {
            flags.insert(boxed(spelling), info_of(canonical));
        }
        Ok(CompiledEngine {
            underscore_is_dash: sig.underscore_is_dash,
            values_required: sig.values_required,
            flags,
            no_value_prefixes,
            served_separator: sig
                .served_name_separator
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(boxed),
            exit_values,
            evidence_bits,
        })
    }

    fn evidence(&self, sig: &Signature, evidence: &crate::signature::Evidence) -> CompiledEvidence {
        CompiledEvidence {
            model_suffixes: evidence.model_suffixes.iter().map(|s| boxed(s)).collect(),
            any_flags: evidence
                .any_flags
                .iter()
                .filter_map(|f| self.evidence_bits.get(&sig.canonical(f)))
                .fold(0, |acc, bit| acc | bit),
            positionals: evidence.positionals.iter().map(|s| boxed(s)).collect(),
        }
    }

    fn info(&self, flag: &[u8]) -> FlagInfo {
        self.flags.get(flag).copied().unwrap_or_else(|| FlagInfo {
            fact: None,
            arity: if self.no_value_prefixes.iter().any(|p| flag.starts_with(p)) {
                Arity::None
            } else {
                Arity::One
            },
            exit: false,
            mode: None,
            modeless_exit: false,
            evidence: 0,
        })
    }
}

/// The values one occurrence of a flag took: an inline `--k=v` value or argv[start..end].
#[derive(Debug, Clone, Copy)]
struct Values<'a> {
    inline: Option<&'a [u8]>,
    start: usize,
    end: usize,
}

impl<'a> Values<'a> {
    fn iter<A: AsRef<[u8]>>(self, argv: &'a [A]) -> impl Iterator<Item = &'a [u8]> {
        let tokens = argv.get(self.start..self.end).unwrap_or(&[]);
        self.inline
            .into_iter()
            .chain(tokens.iter().map(AsRef::as_ref))
    }

    fn last<A: AsRef<[u8]>>(self, argv: &'a [A]) -> Option<&'a [u8]> {
        self.inline.or_else(|| {
            self.end
                .checked_sub(1)
                .filter(|&i| i >= self.start)
                .and_then(|i| argv.get(i))
                .map(AsRef::as_ref)
        })
    }
}

/// Last path component, `/` or `\` separated, without a trailing `.exe` (any case).
pub fn basename(path: &[u8]) -> &[u8] {
    let start = path
        .iter()
        .rposition(|&b| b == b'/' || b == b'\\')
        .map_or(0, |i| i + 1);
    let name = &path[start..];
    if name.len() > 4 && name[name.len() - 4..].eq_ignore_ascii_case(b".exe") {
        &name[..name.len() - 4]
    } else {
        name
    }
}

/// Whether a basename is `prefix` followed by a renamed build's suffix: ASCII letters, digits,
/// `.`, `_`, `-`, not ending in a file extension of letters only (`.sh`, `.log`).
fn prefixed(name: &[u8], prefix: &[u8]) -> bool {
    let Some(suffix) = name.strip_prefix(prefix) else {
        return false;
    };
    if suffix.is_empty()
        || !suffix
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return false;
    }
    match suffix.iter().rposition(|&b| b == b'.') {
        Some(dot) => {
            let extension = &suffix[dot + 1..];
            extension.is_empty() || !extension.iter().all(u8::is_ascii_alphabetic)
        }
        None => true,
    }
}

/// A decimal rank other than 0 (`1`, `01`); anything else (`0`, `$RANK`, `+1`) is none.
fn nonzero_rank(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(u8::is_ascii_digit) && value.iter().any(|&b| b != b'0')
}

/// Whether `path`'s directory ends with one of `directories` (path components, `/` or `\\`
/// separated, empty ones ignored), as `in_directory` in Python.
fn in_directory(path: &[u8], directories: &[Vec<Box<[u8]>>]) -> bool {
    let Some(end) = path.iter().rposition(|&b| b == b'/' || b == b'\\') else {
        return false;
    };
    directories.iter().any(|wanted| {
        let mut parts = path[..end]
            .split(|&b| b == b'/' || b == b'\\')
            .filter(|p| !p.is_empty())
            .rev();
        wanted.iter().rev().all(|w| parts.next() == Some(&**w))
    })
}

/// `HOST:PORT` or `[V6]:PORT` -> (host, if not empty; port text); `None` for anything else.
fn split_address(value: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        let close = rest.iter().position(|&b| b == b']')?;
        (&rest[..close], rest[close + 1..].strip_prefix(b":")?)
    } else {
        let colon = value.iter().rposition(|&b| b == b':')?;
        if value[..colon].contains(&b':') {
            return None;
        }
        (&value[..colon], &value[colon + 1..])
    };
    Some((Some(host).filter(|h| !h.is_empty()), port))
}

fn ends_with_ignore_ascii_case(value: &[u8], suffix: &[u8]) -> bool {
    value.len() >= suffix.len() && value[value.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// How parsing argv as one launch form ended.
enum Outcome<'a> {
    Server(Parsed<'a>),
    /// Asks the program to print and exit (`--help`): not a server.
    Exits,
    /// The form's evidence is missing: argv is not this form at all.
    NoEvidence,
}

/// `python`, `python3`, `python3.11`, `python3.13t`, `Python`, `pythonw`.
fn is_python(name: &[u8]) -> bool {
    if name.len() < 6 || !name[..6].eq_ignore_ascii_case(b"python") {
        return false;
    }
    let rest = &name[6..];
    let digits = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .count();
    let tail = &rest[digits..];
    tail.is_empty() || (tail.len() == 1 && tail[0].is_ascii_alphabetic())
}

/// argparse's negative-number test: `-[0-9]+` or `-[0-9]*\.[0-9]+`.
fn is_negative_number(token: &[u8]) -> bool {
    let Some(body) = token.strip_prefix(b"-") else {
        return false;
    };
    let all_digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    match body.iter().position(|&b| b == b'.') {
        None => !body.is_empty() && all_digits(body),
        Some(dot) => {
            let (int, frac) = (&body[..dot], &body[dot + 1..]);
            all_digits(int) && !frac.is_empty() && all_digits(frac)
        }
    }
}

fn looks_like_flag(token: &[u8]) -> bool {
    token.len() > 1 && token[0] == b'-' && !is_negative_number(token)
}

fn parse_port(value: &[u8]) -> Option<u16> {
    if value.is_empty() || value.len() > 5 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let port = value
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    u16::try_from(port).ok()
}

enum PythonTarget<'a> {
    Module(&'a [u8], usize),
    Script(&'a [u8], usize),
}

const PY_SWITCHES: &[u8] = b"bBdEhiIOPqsSuvVx";
const PY_VALUED: &[u8] = b"WX";

/// The program argv runs: its first word, or the script an interpreter runs (a console script:
/// `[python3, /venv/bin/vllm, ...]`); empty for none. The facade's `_host.shapes.program_path`.
pub fn program_path<A: AsRef<[u8]>>(argv: &[A]) -> &[u8] {
    let Some(first) = argv.first().map(AsRef::as_ref) else {
        return b"";
    };
    if !is_python(basename(first)) {
        return first;
    }
    match python_target(argv) {
        Some(PythonTarget::Script(script, _)) => script,
        _ => b"",
    }
}

/// Finds what an interpreter runs: `-m module` (also `-um module`, `-mmodule`) or a script path.
fn python_target<A: AsRef<[u8]>>(argv: &[A]) -> Option<PythonTarget<'_>> {
    let mut i = 1;
    while i < argv.len() {
        let token = argv[i].as_ref();
        if token.starts_with(b"--") {
            if token == b"--check-hash-based-pycs" {
                i += 2;
                continue;
            }
            return None;
        }
        if token.len() > 1 && token[0] == b'-' {
            let mut advanced = false;
            for pos in 1..token.len() {
                let switch = token[pos];
                if PY_SWITCHES.contains(&switch) {
                    continue;
                }
                if switch == b'm' || PY_VALUED.contains(&switch) {
                    let rest = &token[pos + 1..];
                    let value = if !rest.is_empty() {
                        i += 1;
                        rest
                    } else if i + 1 < argv.len() {
                        i += 2;
                        argv[i - 1].as_ref()
                    } else {
                        return None;
                    };
                    if switch == b'm' {
                        return Some(PythonTarget::Module(value, i));
                    }
                    advanced = true;
                    break;
                }
                return None;
            }
            if !advanced {
                i += 1;
            }
            continue;
        }
        if token == b"-" {
            return None;
        }
        return Some(PythonTarget::Script(token, i + 1));
    }
    None
}

/// Signatures compiled once for scanning: the matcher, and which engines fold their workers (by
/// engine index). Scanners made from the same signatures share one (`Arc`).
#[derive(Debug)]
pub struct CompiledSignatures {
    pub matcher: Matcher,
    pub fold: Vec<bool>,
}

impl CompiledSignatures {
    pub fn new(signatures: &[Signature]) -> Result<Arc<Self>, String> {
        Ok(Arc::new(CompiledSignatures {
            matcher: Matcher::new(signatures)?,
            fold: signatures.iter().map(|s| s.fold_workers).collect(),
        }))
    }
}

impl Matcher {
    /// Compiles the JSON list written by `enginespec.signature.signatures_json`.
    pub fn from_json(json: &str) -> Result<Self, String> {
        Self::new(&signatures_from_json(json)?)
    }

    pub fn new(signatures: &[Signature]) -> Result<Self, String> {
        let mut matcher = Matcher {
            engines: Vec::with_capacity(signatures.len()),
            forms: Vec::new(),
            by_executable: FxHashMap::default(),
            by_module: FxHashMap::default(),
            by_prefix: Vec::new(),
            worker_titles: Vec::new(),
            by_suffix: Vec::new(),
            loader_prefixes: Vec::new(),
            any_program: Vec::new(),
            prefix_first: ByteSet([false; 256]),
            loader_first: ByteSet([false; 256]),
            suffix_last: ByteSet([false; 256]),
        };
        let boxed_all = |names: &[String]| names.iter().map(|s| boxed(s)).collect::<Vec<_>>();
        for (engine, sig) in signatures.iter().enumerate() {
            let compiled = CompiledEngine::new(sig)?;
            for title in &sig.worker_titles {
                matcher.worker_titles.push((boxed(title), engine));
            }
            for form in &sig.launch_forms {
                let form_index = matcher.forms.len();
                matcher.forms.push(CompiledForm {
                    subcommand: boxed_all(&form.subcommand),
                    other_subcommands: boxed_all(&form.other_subcommands),
                    positional_model: form.positional_model,
                    positional_port: form.positional_port,
                    program_model: form.program_model,
                    exit_subcommands: boxed_all(&form.exit_subcommands),
                    no_arguments: form.no_arguments,
                    max_positionals: form.max_positionals,
                    facts: form.facts,
                    host_flags: boxed_all(&form.host_flags),
                    port_flags: boxed_all(&form.port_flags),
                    loaders: boxed_all(&form.loaders),
                    loader_prefixes: boxed_all(&form.loader_prefixes),
                    directories: form
                        .directories
                        .iter()
                        .map(|d| d.split('/').map(boxed).collect())
                        .collect(),
                    evidence: form.evidence.as_ref().map(|e| compiled.evidence(sig, e)),
                    role: form.role,
                    leading: form
                        .leading_flags
                        .iter()
                        .map(|f| (boxed(f), Leading::Value))
                        .chain(form.leading_switches.iter().map(|f| {
                            let exits = sig.exit_flags.iter().any(|e| e == f);
                            (
                                boxed(f),
                                if exits {
                                    Leading::Exit
                                } else {
                                    Leading::Switch
                                },
                            )
                        }))
                        .collect(),
                });
                if form.any_program {
                    matcher.any_program.push((engine, form_index));
                }
                for prefix in &form.executable_prefixes {
                    matcher.by_prefix.push((boxed(prefix), engine, form_index));
                }
                for suffix in &form.executable_suffixes {
                    matcher.by_suffix.push((boxed(suffix), engine, form_index));
                }
                for name in &form.executables {
                    matcher
                        .by_executable
                        .entry(boxed(name))
                        .or_default()
                        .forms
                        .push((engine, form_index));
                }
                for name in &form.loaders {
                    matcher.by_executable.entry(boxed(name)).or_default().loader = true;
                }
                for prefix in &form.loader_prefixes {
                    if !matcher
                        .loader_prefixes
                        .iter()
                        .any(|p| **p == *prefix.as_bytes())
                    {
                        matcher.loader_prefixes.push(boxed(prefix));
                    }
                }
                for name in &form.modules {
                    matcher
                        .by_module
                        .entry(boxed(name))
                        .or_default()
                        .push((engine, form_index));
                }
            }
            matcher.engines.push(compiled);
        }
        matcher.prefix_first = ByteSet::of(
            matcher.by_prefix.iter().map(|(p, _, _)| &**p),
            <[u8]>::first,
        );
        matcher.loader_first =
            ByteSet::of(matcher.loader_prefixes.iter().map(|p| &**p), <[u8]>::first);
        matcher.suffix_last =
            ByteSet::of(matcher.by_suffix.iter().map(|(x, _, _)| &**x), <[u8]>::last);
        let forms = &matcher.forms;
        for program in matcher.by_executable.values_mut() {
            program
                .forms
                .sort_by_key(|&(_, form)| forms[form].directories.is_empty());
        }
        Ok(matcher)
    }

    fn is_loader(&self, program: Option<&Program>, name: &[u8]) -> bool {
        program.is_some_and(|p| p.loader)
            || (self.loader_first.has(name.first())
                && self
                    .loader_prefixes
                    .iter()
                    .any(|p| name.starts_with(p) && prefixed(name, p)))
    }

    /// Classifies argv: `Some` only for a serving process of a known engine. The forms argv's
    /// program may be are tried in signature order, exact names before prefixes and suffixes
    /// (forms bound to a directory first); the first whose subcommand is given and whose
    /// evidence is found decides.
    pub fn parse<'a, A: AsRef<[u8]>>(&self, argv: &'a [A]) -> Option<Parsed<'a>> {
        let first = argv.first()?.as_ref();
        let mut exe = basename(first);
        let mut path = first;
        let mut loader: Option<&[u8]> = None;
        let (mut exact, mut program, start) = if is_python(exe) {
            match python_target(argv)? {
                PythonTarget::Module(name, next) => (self.by_module.get(name), None, next),
                PythonTarget::Script(script, next) => {
                    path = script;
                    exe = basename(script);
                    (
                        self.by_executable.get(exe).map(|p| &p.forms),
                        Some(exe),
                        next,
                    )
                }
            }
        } else {
            let found = self.by_executable.get(exe);
            let forms = found.map(|p| &p.forms).filter(|f| !f.is_empty());
            match argv.get(1) {
                // A loader running the program named next (`[~/.ape-1.10, ./x.llamafile, ...]`).
                Some(next) if forms.is_none() && self.is_loader(found, exe) => {
                    loader = Some(exe);
                    path = next.as_ref();
                    exe = basename(path);
                    (self.by_executable.get(exe).map(|p| &p.forms), Some(exe), 2)
                }
                _ => (forms, Some(exe), 1),
            }
        };
        if exact.is_some_and(Vec::is_empty) {
            exact = None;
        }
        let prefixes = program.filter(|name| {
            self.prefix_first.has(name.first())
                && self.by_prefix.iter().any(|(p, _, _)| prefixed(name, p))
        });
        let suffixes = program.filter(|name| {
            self.suffix_last.has(name.last())
                && self
                    .by_suffix
                    .iter()
                    .any(|(x, _, _)| name.len() > x.len() && name.ends_with(x))
        });
        // Last, the forms that take a loader's program under any name; a flag is no program.
        let any_program: &[(usize, usize)] = match loader {
            Some(_) if !path.starts_with(b"-") => &self.any_program,
            _ => &[],
        };
        if exact.is_none() && prefixes.is_none() && suffixes.is_none() && any_program.is_empty() {
            return self.worker(argv); // almost every process on a host: None
        }
        program = prefixes;
        let by_prefix = self
            .by_prefix
            .iter()
            .filter(move |(prefix, _, _)| program.is_some_and(|name| prefixed(name, prefix)))
            .map(|&(_, engine, form)| (engine, form));
        let by_suffix = self
            .by_suffix
            .iter()
            .filter(move |(suffix, _, _)| {
                suffixes.is_some_and(|name| name.len() > suffix.len() && name.ends_with(suffix))
            })
            .map(|&(_, engine, form)| (engine, form));
        let candidates = exact
            .into_iter()
            .flatten()
            .copied()
            .chain(by_prefix)
            .chain(by_suffix)
            .chain(any_program.iter().copied());
        for (engine, form_index) in candidates {
            let form = &self.forms[form_index];
            if let Some(name) = loader {
                let accepted = form.loaders.iter().any(|l| **l == *name)
                    || form.loader_prefixes.iter().any(|p| prefixed(name, p));
                if !accepted {
                    continue;
                }
            }
            if !form.directories.is_empty() && !in_directory(path, &form.directories) {
                continue;
            }
            let Some(at) = leading_in(argv, start, &form.leading) else {
                return None; // a leading exit flag: the program prints and exits
            };
            let sub = &form.subcommand;
            let end = at + sub.len();
            let Some(given) = argv.get(at..end) else {
                continue;
            };
            if !given.iter().zip(sub).all(|(g, s)| g.as_ref() == &**s) {
                continue;
            }
            let next = argv.get(end).map(AsRef::as_ref);
            if next.is_some_and(|t| form.other_subcommands.iter().any(|o| t == &**o)) {
                continue;
            }
            match self.parse_form(argv, engine, form_index, end, path) {
                Outcome::Server(parsed) => return Some(parsed),
                Outcome::Exits => return None,
                Outcome::NoEvidence => {}
            }
        }
        None
    }

    /// A worker that set its process title (`VLLM::EngineCore`): the whole title is argv[0], so
    /// a path (`/x/VLLM::y`) is never one. It names its engine and nothing else.
    fn worker<'a, A: AsRef<[u8]>>(&self, argv: &'a [A]) -> Option<Parsed<'a>> {
        let title = argv.first()?.as_ref();
        let &(_, engine) = self
            .worker_titles
            .iter()
            .find(|(prefix, _)| title.len() > prefix.len() && title.starts_with(prefix))?;
        Some(Parsed {
            engine,
            model: None,
            served_names: Vec::new(),
            host: None,
            port: None,
            role: Role::Worker,
        })
    }

    /// Reads argv[i..] as the arguments of one launch form.
    fn parse_form<'a, A: AsRef<[u8]>>(
        &self,
        argv: &'a [A],
        engine_index: usize,
        form_index: usize,
        mut i: usize,
        program: &'a [u8],
    ) -> Outcome<'a> {
        let engine = &self.engines[engine_index];
        let form = &self.forms[form_index];
        let n = argv.len();
        if form.no_arguments && i < n {
            return Outcome::Exits;
        }
        if !form.facts {
            return own_flags(argv, engine, engine_index, form, i);
        }
        let positional_model = form.positional_model;
        let mut models: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut served: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut hosts: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut ports: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut addresses: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut ranks: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut actions: [Option<Values<'a>>; MAX_FACT_FLAGS] = [None; MAX_FACT_FLAGS];
        let mut follower = false;
        let mut evidence_seen: u64 = 0;
        // A form that needs evidence reads on past an exit flag: without the evidence argv is not
        // this engine at all, whatever it asks of it.
        let mut exits = false;
        let mut mode: Option<bool> = None;
        let mut modeless_exit = false;
        let mut positional: Option<&'a [u8]> = None;
        let wanted_positionals = form
            .evidence
            .as_ref()
            .map_or(&[][..], |e| &e.positionals[..]);
        let mut positional_found = false;
        let mut positional_port: Option<&'a [u8]> = None;
        let mut positionals = 0usize;
        let port_position = usize::from(positional_model);
        while i < n {
            let token = argv[i].as_ref();
            i += 1;
            if token == b"--" {
                if positional_model && positional.is_none() && i < n {
                    positional = Some(argv[i].as_ref());
                }
                positionals += n - i; // everything after `--` is positional
                break;
            }
            if !looks_like_flag(token) {
                if positionals == 0 && form.exit_subcommands.iter().any(|s| **s == *token) {
                    if form.evidence.is_none() {
                        return Outcome::Exits;
                    }
                    exits = true;
                }
                if positional_model && positional.is_none() {
                    positional = Some(token);
                } else if form.positional_port && positionals == port_position {
                    positional_port = Some(token);
                }
                positional_found |= wanted_positionals.iter().any(|p| **p == *token);
                positionals += 1;
                continue;
            }
            let (name, inline) = match token.iter().position(|&b| b == b'=') {
                Some(eq) if token.starts_with(b"--") && eq > 0 => {
                    (&token[..eq], Some(&token[eq + 1..]))
                }
                _ => (token, None),
            };
            let name: Cow<[u8]> =
                if engine.underscore_is_dash && name.starts_with(b"--") && name.contains(&b'_') {
                    Cow::Owned(
                        name.iter()
                            .map(|&b| if b == b'_' { b'-' } else { b })
                            .collect(),
                    )
                } else {
                    Cow::Borrowed(name)
                };
            let info = engine.info(&name);
            if info.exit {
                if form.evidence.is_none() {
                    return Outcome::Exits;
                }
                exits = true;
            }
            evidence_seen |= info.evidence;
            mode = info.mode.or(mode);
            modeless_exit |= info.modeless_exit;
            let start = i;
            if inline.is_none() {
                match info.arity {
                    Arity::None => {}
                    Arity::Many => {
                        while i < n {
                            let next = argv[i].as_ref();
                            if looks_like_flag(next) || next == b"--" {
                                break;
                            }
                            i += 1;
                        }
                    }
                    Arity::One => {
                        if i < n && !looks_like_flag(argv[i].as_ref()) {
                            i += 1;
                        } else if engine.values_required && token.starts_with(b"--") {
                            // "a value is required for ...": a usage error, the program exits
                            if form.evidence.is_none() {
                                return Outcome::Exits;
                            }
                            exits = true;
                        }
                    }
                }
            }
            let values = Some(Values {
                inline,
                start,
                end: if inline.is_some() { start } else { i },
            });
            match info.fact {
                Some(Fact::Model(p)) => models[p] = values,
                Some(Fact::ServedName(p)) => served[p] = values,
                Some(Fact::Host(p)) => hosts[p] = values,
                Some(Fact::Port(p)) => ports[p] = values,
                Some(Fact::Address(p)) => addresses[p] = values,
                Some(Fact::Rank(p)) => ranks[p] = values,
                Some(Fact::Follower) => follower = true,
                Some(Fact::Action(p)) => actions[p] = values,
                None => {}
            }
        }
        if form.max_positionals.is_some_and(|most| positionals > most) {
            // clap "unexpected argument", argparse "unrecognized arguments": a usage error
            exits = true;
        }
        let exit_action = actions
            .iter()
            .zip(&engine.exit_values)
            .any(|(slot, stops)| {
                slot.and_then(|v| v.last(argv))
                    .is_some_and(|v| stops.iter().any(|s| **s == *v))
            });
        exits |= exit_action;
        let first = |slots: &[Option<Values<'a>>]| -> Option<&'a [u8]> {
            slots
                .iter()
                .flatten()
                .filter_map(|v| v.last(argv))
                .find(|v| !v.is_empty())
        };
        let model = positional
            .filter(|p| !p.is_empty())
            .or_else(|| first(&models))
            .or_else(|| Some(program).filter(|p| form.program_model && !p.is_empty()));
        let mut served_names = Vec::new();
        for values in served.iter().flatten() {
            for value in values.iter(argv) {
                match &engine.served_separator {
                    Some(sep) => served_names.extend(split(value, sep).filter(|p| !p.is_empty())),
                    None if !value.is_empty() => served_names.push(value),
                    None => {}
                }
            }
            if !served_names.is_empty() {
                break;
            }
        }
        if let Some(evidence) = &form.evidence {
            let suffix_found = evidence.model_suffixes.is_empty()
                || model.is_some_and(|m| {
                    evidence
                        .model_suffixes
                        .iter()
                        .any(|s| ends_with_ignore_ascii_case(m, s))
                });
            let flag_found = evidence.any_flags == 0 || evidence.any_flags & evidence_seen != 0;
            let positional_ok = evidence.positionals.is_empty() || positional_found;
            if !suffix_found || !flag_found || !positional_ok {
                return Outcome::NoEvidence;
            }
        }
        if exits || mode == Some(false) || (mode.is_none() && modeless_exit) {
            return Outcome::Exits;
        }
        let address = first(&addresses).and_then(split_address);
        let port_text = first(&ports)
            .or_else(|| positional_port.filter(|p| !p.is_empty()))
            .or_else(|| address.map(|(_, port)| port).filter(|p| !p.is_empty()));
        let role =
            if form.role == Role::Server && (follower || first(&ranks).is_some_and(nonzero_rank)) {
                Role::Follower
            } else {
                form.role
            };
        Outcome::Server(Parsed {
            engine: engine_index,
            model,
            served_names,
            host: first(&hosts).or_else(|| address.and_then(|(host, _)| host)),
            port: port_text.and_then(parse_port),
            role,
        })
    }
}

/// A program of the engine's that shares none of its flags (llama.cpp's rpc-server): only the
/// form's own host and port flags and the signature's exit flags (as written or by an alias) are
/// read, as `Matcher._own_flags` in Python.
fn own_flags<'a, A: AsRef<[u8]>>(
    argv: &'a [A],
    engine: &CompiledEngine,
    engine_index: usize,
    form: &CompiledForm,
    mut i: usize,
) -> Outcome<'a> {
    let mut host: Option<&'a [u8]> = None;
    let mut port: Option<&'a [u8]> = None;
    while let Some(token) = argv.get(i).map(AsRef::as_ref) {
        i += 1;
        if engine.flags.get(token).is_some_and(|f| f.exit) {
            return Outcome::Exits;
        }
        let is_host = form.host_flags.iter().any(|f| **f == *token);
        if is_host || form.port_flags.iter().any(|f| **f == *token) {
            let Some(value) = argv.get(i).map(AsRef::as_ref) else {
                return Outcome::Exits; // its value is required: the program exits
            };
            if is_host {
                host = Some(value);
            } else {
                port = Some(value);
            }
            i += 1;
        }
    }
    Outcome::Server(Parsed {
        engine: engine_index,
        model: None,
        served_names: Vec::new(),
        host: host.filter(|h| !h.is_empty()),
        port: port.filter(|p| !p.is_empty()).and_then(parse_port),
        role: form.role,
    })
}

/// Splits on a non-empty byte separator, like `str.split(sep)`.
fn split<'a, 's>(value: &'a [u8], sep: &'s [u8]) -> impl Iterator<Item = &'a [u8]> + use<'a, 's> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.windows(sep.len()).position(|w| w == sep) {
            Some(at) => {
                rest = Some(&current[at + sep.len()..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

#[cfg(test)]
mod tests;
