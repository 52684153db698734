//! Bodies of the fuzz targets as plain functions: `fuzz_targets/*.rs` hand them libFuzzer's input,
//! and `tests/corpus.rs` replays every committed seed and regression input through them on stable.
//!
//! Beyond "no panic, no hang, no unbounded allocation", each target checks what must hold for any
//! input: a classification is deterministic and every fact it reports is a slice of the argv it
//! came from; parsers give back only what their input holds; the scanner reports only processes
//! that exist and remembers no more than it listed.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use enginespec::cgroup;
use enginespec::gguf;
use enginespec::matcher::Matcher;
use enginespec::proc_events::{self, Hints, Message, Sequences};
use enginespec::procfs;
use enginespec::proxy;
use enginespec::scan::{ReadSet, ScanOptions, Scanner};
use enginespec::signature::{signatures_from_json, Signature};
use serde::Serialize;

/// The built-in engines' signatures as the Python package writes them (`fuzz/refresh.py`).
pub const REAL_SIGNATURES: &str = include_str!("../signatures.json");

fn real_signatures() -> &'static [Signature] {
    static SIGNATURES: OnceLock<Vec<Signature>> = OnceLock::new();
    SIGNATURES.get_or_init(|| {
        signatures_from_json(REAL_SIGNATURES).expect("fuzz/signatures.json is valid")
    })
}

fn real_matcher() -> &'static Matcher {
    static MATCHER: OnceLock<Matcher> = OnceLock::new();
    MATCHER.get_or_init(|| Matcher::new(real_signatures()).expect("the real signatures compile"))
}

/// Every string in the real signatures (flags, executables, modules, subcommands): the words the
/// structured targets build argv from, so that they reach past the launch-form lookup.
fn real_words() -> &'static [String] {
    static WORDS: OnceLock<Vec<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let value: serde_json::Value = serde_json::from_str(REAL_SIGNATURES).expect("valid JSON");
        let mut words = std::collections::BTreeSet::new();
        collect_strings(&value, &mut words);
        words.extend(
            [
                "python3",
                "/usr/bin/python3.11",
                "-u",
                "-m",
                "--",
                "-",
                "sh",
                "-c",
                "env",
            ]
            .map(String::from),
        );
        words.into_iter().collect()
    })
}

/// Every string value, and the keys of `aliases` (flags); not the field names.
fn collect_strings(value: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::String(s) => {
            out.insert(s.clone());
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| {
            if k == "aliases" {
                if let Some(aliases) = v.as_object() {
                    out.extend(aliases.keys().cloned());
                }
            }
            collect_strings(v, out);
        }),
        _ => {}
    }
}

fn within(value: &[u8], argv: &[&[u8]]) -> bool {
    let start = value.as_ptr() as usize;
    let end = start + value.len();
    value.is_empty()
        || argv.iter().any(|token| {
            let t = token.as_ptr() as usize;
            start >= t && end <= t + token.len()
        })
}

/// Classifies `argv` and checks what holds for every classification.
fn check_parse(matcher: &Matcher, engines: usize, argv: &[&[u8]]) {
    let parsed = matcher.parse(argv);
    assert_eq!(
        parsed,
        matcher.parse(argv),
        "classification is deterministic"
    );
    let Some(parsed) = parsed else {
        return;
    };
    assert!(
        parsed.engine < engines,
        "engine index {} of {engines}",
        parsed.engine
    );
    let values = parsed
        .model
        .iter()
        .chain(parsed.host.iter())
        .chain(parsed.served_names.iter());
    for value in values {
        assert!(
            within(value, argv),
            "fact {value:?} is not a slice of argv {argv:?}"
        );
    }
    let facts = parsed.to_facts();
    assert_eq!(facts.engine, parsed.engine);
    assert_eq!(facts.model.as_deref(), parsed.model);
    assert_eq!(facts.host.as_deref(), parsed.host);
    assert_eq!(facts.port, parsed.port);
    assert!(facts
        .served_names
        .iter()
        .map(Vec::as_slice)
        .eq(parsed.served_names.iter().copied()));
}

/// (a) argv from `/proc/PID/cmdline` bytes (split on NUL as the scanner does) against the real
/// signatures.
pub fn argv_real(data: &[u8]) {
    let argv = procfs::split_cmdline(data);
    check_parse(real_matcher(), real_signatures().len(), &argv);
}

/// A string of a fuzzed signature or argv: mostly a word of the real signatures or a few made-up
/// ones (so signatures and argv share tokens), sometimes any short string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
struct Word(String);

const MADE_UP: &[&str] = &[
    "toy", "serve", "--x", "-x", "--x-y", "--x_y", "m", "a,b", ",", "=", "", "8080", "::1",
];

impl<'a> Arbitrary<'a> for Word {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Word(match u.int_in_range(0..=9u8)? {
            0..=5 => u.choose(real_words())?.clone(),
            6..=7 => (*u.choose(MADE_UP)?).to_string(),
            _ => {
                let s: String = u.arbitrary()?;
                s.chars().take(12).collect()
            }
        }))
    }
}

#[derive(Debug, Arbitrary, Serialize)]
struct FuzzForm {
    executables: Vec<Word>,
    executable_suffixes: Vec<Word>,
    modules: Vec<Word>,
    loaders: Vec<Word>,
    loader_prefixes: Vec<Word>,
    directories: Vec<Word>,
    subcommand: Vec<Word>,
    positional_model: bool,
    positional_port: bool,
    program_model: bool,
    exit_subcommands: Vec<Word>,
    no_arguments: bool,
    facts: bool,
}

/// Mirrors `enginespec::Signature`'s JSON form (fields the Rust side ignores are left out).
#[derive(Debug, Arbitrary, Serialize)]
struct FuzzSignature {
    engine: Word,
    launch_forms: Vec<FuzzForm>,
    underscore_is_dash: bool,
    aliases: BTreeMap<Word, Word>,
    model_flags: Vec<Word>,
    served_name_flags: Vec<Word>,
    served_name_separator: Option<Word>,
    host_flags: Vec<Word>,
    port_flags: Vec<Word>,
    address_flags: Vec<Word>,
    mode_flags: BTreeMap<Word, bool>,
    modeless_exit_flags: Vec<Word>,
    no_value_flags: Vec<Word>,
    no_value_prefixes: Vec<Word>,
    multi_value_flags: Vec<Word>,
    exit_flags: Vec<Word>,
    fold_workers: bool,
}

#[derive(Debug, Arbitrary)]
enum Token {
    Word(Word),
    /// `--flag=value`
    Joined(Word, Word),
    Raw(Vec<u8>),
}

impl Token {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Token::Word(w) => w.0.as_bytes().to_vec(),
            Token::Joined(k, v) => format!("{}={}", k.0, v.0).into_bytes(),
            Token::Raw(b) => b.clone(),
        }
    }
}

/// (a) argv against arbitrary valid signatures, built from the input and compiled through their
/// JSON form (`signatures_from_json`), as the Python package hands them over.
pub fn argv_signatures(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(signatures) = Vec::<FuzzSignature>::arbitrary(&mut u) else {
        return;
    };
    let Ok(tokens) = u
        .arbitrary_take_rest_iter::<Token>()
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
    else {
        return;
    };
    let json = serde_json::to_string(&signatures).expect("serializable");
    let compiled = signatures_from_json(&json).unwrap_or_else(|err| panic!("{err}: {json}"));
    assert_eq!(compiled.len(), signatures.len());
    let argv_owned: Vec<Vec<u8>> = tokens.iter().map(Token::bytes).collect();
    let argv: Vec<&[u8]> = argv_owned.iter().map(Vec::as_slice).collect();
    match Matcher::new(&compiled) {
        Ok(matcher) => check_parse(&matcher, compiled.len(), &argv),
        // Refused signatures (too many flags for one fact) say why.
        Err(message) => assert!(!message.is_empty()),
    }
}

/// Any text as the signatures document: an error or a matcher, never a panic; a matcher then
/// classifies a few argv.
pub fn signatures_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(signatures) = signatures_from_json(text) else {
        assert!(Matcher::from_json(text).is_err());
        return;
    };
    let Ok(matcher) = Matcher::new(&signatures) else {
        return;
    };
    for sig in &signatures {
        for form in &sig.launch_forms {
            for exe in form.executables.iter().chain(form.modules.iter()) {
                let mut argv: Vec<&[u8]> = vec![exe.as_bytes()];
                argv.extend(form.subcommand.iter().map(|s| s.as_bytes()));
                argv.extend(sig.model_flags.iter().map(|s| s.as_bytes()));
                check_parse(&matcher, signatures.len(), &argv);
                let mut python: Vec<&[u8]> = vec![b"python3", b"-m"];
                python.extend_from_slice(&argv);
                check_parse(&matcher, signatures.len(), &python);
            }
        }
    }
}

/// (b) every parser of what the scanner reads from procfs, on the same bytes.
/// A process-event datagram (anyone may send to the group): parsing is deterministic, every
/// message comes from a whole netlink message of the input (header, connector header, and at
/// least the event's `what` and `cpu`), events name positive pids, and the hints keep each one.
pub fn proc_events(data: &[u8]) {
    let mut messages = Vec::new();
    let result = proc_events::parse_datagram(data, &mut messages);
    let mut again = Vec::new();
    assert_eq!(proc_events::parse_datagram(data, &mut again), result);
    assert_eq!(again, messages);
    assert!(messages.len() <= data.len() / (16 + 20 + 8));
    let events = messages
        .iter()
        .filter(|m| matches!(m, Message::Event { .. }))
        .count();
    assert!(messages
        .iter()
        .all(|m| !matches!(m, Message::Event { pid, .. } if *pid <= 0)));
    let mut hints = Hints::default();
    let mut sequences = Sequences::default();
    hints.add(&messages, &mut sequences);
    hints.add(&messages, &mut sequences);
    assert_eq!(hints.changed.len(), 2 * events);
    // a second copy of the messages is late, never a loss of its own
    if hints.lost {
        let mut fresh = Hints::default();
        fresh.add(&messages, &mut Sequences::default());
        assert!(fresh.lost, "a second copy alone cannot be a loss");
    }
}

/// The GGUF header reader: any bytes give a header or an error, never a panic, a hang or an
/// allocation beyond the input; a header holds no more than its bytes can encode. The same bytes
/// behind a size claimed far larger (a sparse file whose tail is short) read the same or fail.
pub fn gguf(data: &[u8]) {
    let limits = gguf::Limits {
        max_header_bytes: 1 << 20,
        max_string_bytes: 256,
        max_array_items: 64,
    };
    let size = data.len() as u64;
    let header = gguf::read_header(data, size, &limits);
    if let Ok(header) = &header {
        assert!(header.metadata.len() as u64 * 13 <= size);
        assert!(header.tensors.len() as u64 * 24 <= size);
        for (key, _, _) in &header.metadata {
            assert!(
                key.len() <= 3 * 256,
                "a key of at most 256 bytes, lossily decoded"
            );
        }
        for t in &header.tensors {
            assert!(t.dims.len() <= 4);
        }
    }
    let claimed = gguf::read_header(data, size + (20 << 30), &limits);
    if let Ok(header) = header {
        // compared as printed: a NaN float value is equal to itself there
        assert_eq!(
            format!("{claimed:?}"),
            format!("{:?}", Ok::<_, String>(header))
        );
    }
}

pub fn procfs(data: &[u8]) {
    // cmdline: the parts joined by NUL give back the input less one trailing NUL.
    let parts = procfs::split_cmdline(data);
    if !data.is_empty() {
        assert_eq!(
            parts.join(&b"\0"[..]),
            data.strip_suffix(b"\0").unwrap_or(data)
        );
    }
    if let Some(n) = procfs::parse_u64(data) {
        let text = std::str::from_utf8(data).expect("parsed as text");
        assert_eq!(text.trim().parse::<u64>().ok(), Some(n));
    }
    // stat: the state letter comes after the last `)` (the command name may hold spaces and `)`).
    if let Some(stat) = procfs::parse_stat(data) {
        let close = data
            .iter()
            .rposition(|&b| b == b')')
            .expect("a `)` was found");
        assert!(data[close..].contains(&stat.state));
    }
    for key in [&b"btime"[..], b"processes", b"cpu", b""] {
        let _ = procfs::proc_stat_value(data, key);
    }
    // environ: each entry kept is a NAME=value of the input, with a name asked for.
    let names = [b"PATH".to_vec(), Vec::new()];
    for cut in [false, true] {
        for (name, value) in procfs::environ_entries(data, cut, &names) {
            assert!(names.iter().any(|n| n == name));
            let entry = [name, b"=", value].concat();
            assert!(data.split(|&b| b == 0).any(|e| e == entry.as_slice()));
        }
    }
    let children: Vec<i32> = procfs::parse_children(data).collect();
    assert!(children.iter().all(|&pid| pid > 0));
    assert!(children.len() <= data.len() / 2 + 1);
    if let Some(inode) = procfs::parse_socket_link(data) {
        assert!(
            data.starts_with(b"socket:[") && data.ends_with(b"]"),
            "{inode}"
        );
    }
    let listening: Vec<procfs::TcpListen> = procfs::parse_tcp_listen(data).collect();
    assert!(listening.len() <= data.iter().filter(|&&b| b == b'\n').count());
    assert!(listening
        .iter()
        .all(|l| l.address.len() == 4 || l.address.len() == 16));
    // cgroup: an id is 64 lowercase hex digits found in the input; a pod uid is a UUID with
    // dashes (underscores given back as dashes) or 32 hex digits, from the input.
    if let Some(found) = cgroup::parse_cgroup(data) {
        let holds = |text: &str| data.windows(text.len()).any(|w| w == text.as_bytes());
        assert!(
            found.id.len() == 64
                && found
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert!(holds(&found.id));
        assert!(["docker", "podman", "containerd", "cri-o", "kubernetes"].contains(&found.runtime));
        if let Some(pod) = &found.pod_uid {
            let dashes: Vec<usize> = pod.match_indices('-').map(|(i, _)| i).collect();
            assert!(
                dashes.is_empty() && pod.len() == 32
                    || dashes == [8, 13, 18, 23] && pod.len() == 36
            );
            assert!(holds(&pod.replace('-', "")[..8]), "{pod}");
        }
    }
    // docker-proxy argv (the input as a cmdline): ports are 1-65535, the addresses come from it.
    if let Some(forward) = proxy::proxy_flags(&parts) {
        assert!(forward.host_port > 0 && forward.container_port > 0);
        for address in [&forward.host_ip, &forward.container_ip] {
            assert!(parts.iter().any(|part| part.ends_with(address)));
        }
    }
    // getdents64 records: each listed pid needs a record of 20 bytes or more.
    let mut pids = Vec::new();
    let _complete = procfs::parse_pid_dirents(data, &mut pids);
    assert!(pids.len() <= data.len() / 20);
}

/// Text of a counter file: well formed most of the time, anything otherwise.
#[derive(Debug, Arbitrary)]
enum Counter {
    Number(u64),
    Raw(Vec<u8>),
}

impl Counter {
    fn text(&self) -> Vec<u8> {
        match self {
            Counter::Number(n) => format!("{n}\n").into_bytes(),
            Counter::Raw(b) => b.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum StatFile {
    Fields {
        comm: Vec<u8>,
        state: u8,
        ppid: i32,
        start_ticks: u64,
    },
    Raw(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Cmdline {
    Argv(Vec<Token>),
    Raw(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Children {
    /// Pids as the kernel writes them (`101 102 `), among the fake processes' pids (cycles too).
    Pids(Vec<u8>),
    Raw(Vec<u8>),
}

impl Children {
    fn text(&self) -> Vec<u8> {
        match self {
            Children::Pids(pids) => pids
                .iter()
                .map(|&p| format!("{} ", i32::from(p) + 1))
                .collect::<String>()
                .into_bytes(),
            Children::Raw(b) => b.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct FakeProcess {
    pid: u8,
    cmdline: Cmdline,
    stat: StatFile,
    /// `task/PID/children`
    children: Children,
    exe: Option<Vec<u8>>,
    /// Targets of `fd/N` links (`socket:[INODE]` for sockets).
    fds: Vec<Vec<u8>>,
    tcp: Vec<u8>,
    tcp6: Option<Vec<u8>>,
}

#[derive(Debug, Arbitrary)]
struct FakeHost {
    btime: Counter,
    forks: Counter,
    last_pid: Counter,
    pid_max: Option<Counter>,
    processes: Vec<FakeProcess>,
    /// Processes removed before the second scan (indexes into `processes`).
    exits: Vec<u8>,
    forks_between: u8,
    /// Re-read engines' trees and sockets on every scan, or trust them between scans.
    refresh_every_scan: bool,
}

fn write_stat_file(root: &Path, host: &FakeHost, extra_forks: u64) {
    let mut stat = b"cpu  1 0 1 100 0 0 0 0 0 0\nbtime ".to_vec();
    stat.extend(host.btime.text());
    stat.extend(b"processes ");
    match &host.forks {
        Counter::Number(n) => {
            stat.extend(format!("{}\n", n.wrapping_add(extra_forks)).into_bytes())
        }
        Counter::Raw(b) => stat.extend(b),
    }
    let _ = fs::write(root.join("stat"), stat);
}

fn no_nul(bytes: &[u8], max: usize) -> Vec<u8> {
    let mut out: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|&b| b != 0)
        .take(max)
        .collect();
    if out.is_empty() {
        out.push(b'x');
    }
    out
}

fn write_process(root: &Path, pid: i32, p: &FakeProcess) -> std::io::Result<()> {
    let dir = root.join(pid.to_string());
    let task = dir.join("task").join(pid.to_string());
    fs::create_dir_all(&task)?;
    fs::create_dir_all(dir.join("fd"))?;
    fs::create_dir_all(dir.join("net"))?;
    let cmdline = match &p.cmdline {
        Cmdline::Argv(tokens) => tokens
            .iter()
            .flat_map(|t| {
                let mut b = t.bytes();
                b.push(0);
                b
            })
            .collect(),
        Cmdline::Raw(b) => b.clone(),
    };
    fs::write(dir.join("cmdline"), cmdline)?;
    let stat = match &p.stat {
        StatFile::Fields {
            comm,
            state,
            ppid,
            start_ticks,
        } => {
            let mut s = format!("{pid} (").into_bytes();
            s.extend(comm.iter().take(16));
            s.extend(format!(") {} {ppid} 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 1000 100\n", char::from(*state)).into_bytes());
            s
        }
        StatFile::Raw(b) => b.clone(),
    };
    fs::write(dir.join("stat"), stat)?;
    fs::write(task.join("children"), p.children.text())?;
    if let Some(exe) = &p.exe {
        symlink(
            std::ffi::OsStr::from_bytes(&no_nul(exe, 200)),
            dir.join("exe"),
        )?;
    }
    for (i, target) in p.fds.iter().take(8).enumerate() {
        symlink(
            std::ffi::OsStr::from_bytes(&no_nul(target, 64)),
            dir.join("fd").join(i.to_string()),
        )?;
    }
    fs::write(dir.join("net/tcp"), &p.tcp)?;
    if let Some(tcp6) = &p.tcp6 {
        fs::write(dir.join("net/tcp6"), tcp6)?;
    }
    Ok(())
}

/// (b) the scanner over a fake procfs whose every file comes from the input: it reports only
/// listed processes, remembers no more processes than it listed, and never panics.
pub fn scanner(data: &[u8]) {
    let Ok(host) = FakeHost::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm")
    } else {
        Path::new("/tmp")
    };
    let dir = tempfile::Builder::new()
        .prefix("enginespec-fuzz-")
        .tempdir_in(base)
        .expect("temporary directory");
    let root = dir.path();
    fs::create_dir_all(root.join("sys/kernel")).expect("fake procfs");
    write_stat_file(root, &host, 0);
    let _ = fs::write(root.join("sys/kernel/ns_last_pid"), host.last_pid.text());
    if let Some(pid_max) = &host.pid_max {
        let _ = fs::write(root.join("sys/kernel/pid_max"), pid_max.text());
    }
    let mut pids: Vec<i32> = Vec::new();
    for p in host.processes.iter().take(12) {
        let pid = i32::from(p.pid) + 1;
        if !pids.contains(&pid) && write_process(root, pid, p).is_ok() {
            pids.push(pid);
        }
    }
    let options = ScanOptions {
        wrappers: vec![b"sh".to_vec(), b"env".to_vec(), b"nohup".to_vec()],
        young: Duration::from_secs(5),
        listen_ports: true,
        refresh: if host.refresh_every_scan {
            Duration::ZERO
        } else {
            Duration::from_secs(3600)
        },
        proc_root: root.to_path_buf(),
        // Everything a read set can ask, of every engine (the fake host has none of its files).
        read_set: ReadSet {
            environ: vec![vec![b"PATH".to_vec()]; real_signatures().len()],
            cgroup: true,
            netns: true,
            checkouts: vec![
                [(b"main.py".to_vec(), vec![b"common/args.py".to_vec()])]
                    .into_iter()
                    .collect();
                real_signatures().len()
            ],
            devices: true,
        },
    };
    let mut scanner =
        Scanner::new(real_signatures(), options).expect("the real signatures compile");
    // Reported: live processes only. Remembered: at most what the last listing held (a scan that
    // skips the listing, no fork having happened, keeps settled processes until the next one).
    let listed = pids.len();
    let check = |found: &[std::sync::Arc<enginespec::scan::EngineProc>],
                 scanner: &Scanner,
                 live: &[i32]| {
        for proc in found {
            assert!(
                live.contains(&proc.pid),
                "reported pid {} was never listed",
                proc.pid
            );
            assert!(proc.facts.engine < real_signatures().len());
            assert!(
                !proc.descendants.contains(&proc.pid),
                "pid {} is its own descendant",
                proc.pid
            );
            assert!(
                proc.descendants.windows(2).all(|w| w[0] < w[1]),
                "descendants sorted, unique"
            );
            assert!(
                proc.listen_ports.windows(2).all(|w| w[0] < w[1]),
                "ports sorted, unique"
            );
        }
        assert!(
            scanner.known_len() <= listed,
            "{} known, {listed} listed",
            scanner.known_len()
        );
    };
    let found = scanner.scan();
    check(&found, &scanner, &pids);
    // Some exit, the fork counter moves (or not), and the scanner polls again.
    for &i in host.exits.iter().take(4) {
        if let Some(&pid) = pids.get(usize::from(i) % pids.len().max(1)) {
            let _ = fs::remove_dir_all(root.join(pid.to_string()));
            pids.retain(|&p| p != pid);
        }
    }
    write_stat_file(root, &host, u64::from(host.forks_between));
    let found = scanner.scan();
    check(&found, &scanner, &pids);
}
