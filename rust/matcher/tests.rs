//! Unit and property tests of the generic matcher, on made-up engines (no real engine knowledge
//! lives in Rust; the real signatures are tested from Python against the corpus).

use proptest::prelude::*;

use super::*;

const SIGNATURES: &str = r#"[
  {"engine": "demo",
   "launch_forms": [
     {"executables": ["demo"], "subcommand": ["serve"], "positional_model": true},
     {"modules": ["demo.server"]}
   ],
   "underscore_is_dash": true,
   "aliases": {"-m": "--model", "-a": "--alias"},
   "model_flags": ["--model", "--repo"],
   "served_name_flags": ["--alias"],
   "served_name_separator": ",",
   "host_flags": ["--host"],
   "port_flags": ["--port"],
   "no_value_flags": ["--trust"],
   "no_value_prefixes": ["--no-"],
   "multi_value_flags": ["--many"],
   "exit_flags": ["--help", "-h"]},
  {"engine": "other",
   "launch_forms": [{"executables": ["other-server"]}],
   "model_flags": ["--model"]},
  {"engine": "roles",
   "launch_forms": [
     {"executables": ["roles"], "subcommand": ["serve"]},
     {"executables": ["roles"], "subcommand": ["runner"], "role": "runner"},
     {"executables": ["roles-worker"], "role": "follower"},
     {"executable_prefixes": ["roles-server-"]},
     {"executables": ["server"],
      "evidence": {"model_suffixes": [".bin"], "any_flags": ["-l", "--mlock"]}}
   ],
   "underscore_is_dash": true,
   "aliases": {"-m": "--model", "-l": "--layers"},
   "model_flags": ["--model"],
   "no_value_flags": ["--mlock", "--headless"],
   "exit_flags": ["--help"],
   "follower_flags": ["--headless"],
   "follower_rank_flags": ["--node-rank", "--rank"],
   "worker_titles": ["Roles::", "rw:"]},
  {"engine": "fallback",
   "launch_forms": [{"executables": ["server"]}],
   "model_flags": ["--weights"]},
  {"engine": "group",
   "launch_forms": [
     {"executables": ["group"], "subcommand": ["serve"], "positional_model": true},
     {"executables": ["group"], "positional_model": true, "other_subcommands": ["serve", "route"]}
   ],
   "exit_flags": ["--help"]},
  {"engine": "globals",
   "launch_forms": [
     {"executables": ["globals"], "subcommand": ["serve"], "positional_model": true,
      "leading_flags": ["--runtime"], "leading_switches": ["--debug", "--dryrun"]}
   ],
   "port_flags": ["--port"],
   "exit_flags": ["--dryrun"]},
  {"engine": "strict",
   "launch_forms": [{"executables": ["strict"]}],
   "model_flags": ["--model"],
   "no_value_flags": ["--flag"],
   "values_required": true}
]"#;

fn matcher() -> Matcher {
    Matcher::from_json(SIGNATURES).expect("test signatures are valid")
}

fn parse(argv: &[&str]) -> Option<Parsed<'static>> {
    let owned: Vec<Vec<u8>> = argv.iter().map(|s| s.as_bytes().to_vec()).collect();
    let leaked: &'static [Vec<u8>] = Box::leak(owned.into_boxed_slice());
    Box::leak(Box::new(matcher())).parse(leaked)
}

fn model(argv: &[&str]) -> Option<String> {
    parse(argv)
        .and_then(|p| p.model)
        .map(|m| String::from_utf8_lossy(m).into_owned())
}

#[test]
fn launch_forms() {
    assert_eq!(parse(&["demo", "serve", "m"]).map(|p| p.engine), Some(0));
    assert_eq!(
        parse(&["/v/bin/python3.11", "/v/bin/demo", "serve"]).map(|p| p.engine),
        Some(0)
    );
    assert_eq!(
        parse(&["Python", "-u", "-X", "dev", "-m", "demo.server"]).map(|p| p.engine),
        Some(0)
    );
    assert_eq!(
        parse(&["python", "-um", "demo.server"]).map(|p| p.engine),
        Some(0)
    );
    assert_eq!(
        parse(&["python", "-mdemo.server"]).map(|p| p.engine),
        Some(0)
    );
    assert_eq!(
        parse(&["C:\\bin\\other-server.EXE"]).map(|p| p.engine),
        Some(1)
    );
}

#[test]
fn worker_titles() {
    let worker = |argv: &[&str]| parse(argv).map(|p| (p.engine, p.role, p.model, p.port));
    assert_eq!(
        worker(&["Roles::Core"]),
        Some((2, Role::Worker, None, None))
    );
    assert_eq!(
        worker(&["Roles::W_1", "", ""]),
        Some((2, Role::Worker, None, None))
    );
    // A launch form's program is never a title; a bare prefix, a path or another case is none.
    assert_eq!(
        worker(&["roles-worker"]),
        Some((2, Role::Follower, None, None))
    );
    for argv in [
        &["Roles::"][..],
        &["/x/Roles::Core"],
        &["roles::Core"],
        &["python", "Roles::x"],
    ] {
        assert!(parse(argv).is_none(), "{argv:?}");
    }
}

#[test]
fn look_alikes_are_rejected() {
    for argv in [
        &["demo", "bench", "serve"][..],
        &["demo"],
        &["grep", "demo"],
        &["python", "-c", "import demo.server"],
        &["python", "-m", "demo.server.other"],
        &["python", "demo.py", "serve"],
        &["demo", "serve", "--help"],
        &["demo", "serve", "m", "--help=all"],
        &["python-config", "-m", "demo.server"],
        &[],
    ] {
        assert_eq!(parse(argv), None, "{argv:?}");
    }
}

#[test]
fn flags_and_values() {
    assert_eq!(
        model(&["demo", "serve", "--host", "0.0.0.0", "/models/a"]),
        Some("/models/a".into())
    );
    assert_eq!(
        model(&["demo", "serve", "--trust", "/models/a"]),
        Some("/models/a".into())
    );
    assert_eq!(
        model(&["demo", "serve", "--no-x", "/models/a"]),
        Some("/models/a".into())
    );
    // A multi-value flag swallows following values, as argparse nargs="+" does.
    assert_eq!(
        model(&["demo", "serve", "--many", "a", "b", "--model", "m"]),
        Some("m".into())
    );
    assert_eq!(
        model(&["demo", "serve", "--model=x", "pos"]),
        Some("pos".into())
    );
    assert_eq!(model(&["demo", "serve", "--repo", "r"]), Some("r".into()));
    assert_eq!(
        model(&["demo", "serve", "--repo", "r", "-m", "x"]),
        Some("x".into())
    );
    assert_eq!(model(&["demo", "serve", "--", "p"]), Some("p".into()));
    let p = parse(&[
        "demo",
        "serve",
        "--port=0800",
        "--host",
        "h",
        "-a",
        "a,,b",
        "--alias_x",
        "y",
    ])
    .unwrap();
    assert_eq!(p.port, Some(800));
    assert_eq!(p.host, Some(&b"h"[..]));
    assert_eq!(p.served_names, vec![&b"a"[..], &b"b"[..]]);
    assert_eq!(
        parse(&["demo", "serve", "--port", "65536"]).unwrap().port,
        None
    );
    assert_eq!(
        parse(&["demo", "serve", "--port", "+80"]).unwrap().port,
        None
    );
    // Negative numbers are values, not flags.
    assert_eq!(model(&["other-server", "--model", "-1"]), Some("-1".into()));
}

#[test]
fn underscores_only_for_engines_that_normalise() {
    assert_eq!(
        parse(&["demo", "serve", "--po_rt", "1"]).unwrap().port,
        None
    );
    let m = Matcher::from_json(
        r#"[{"engine":"u","launch_forms":[{"executables":["u"]}],"underscore_is_dash":true,"port_flags":["--the-port"]}]"#,
    )
    .unwrap();
    let argv: Vec<&[u8]> = vec![b"u", b"--the_port", b"9"];
    assert_eq!(m.parse(&argv).unwrap().port, Some(9));
}

fn role(argv: &[&str]) -> Option<Role> {
    parse(argv).map(|p| p.role)
}

#[test]
fn roles_come_from_the_form_and_the_follower_flags() {
    assert_eq!(role(&["roles", "serve"]), Some(Role::Server));
    assert_eq!(
        role(&["roles", "runner", "--model", "m"]),
        Some(Role::Runner)
    );
    assert_eq!(role(&["roles-worker"]), Some(Role::Follower));
    assert_eq!(
        role(&["roles", "serve", "--headless"]),
        Some(Role::Follower)
    );
    assert_eq!(
        role(&["roles", "serve", "--headless", "m"]),
        Some(Role::Follower)
    );
    assert_eq!(
        role(&["roles", "serve", "--no-headless"]),
        Some(Role::Server)
    );
    // A runner or a follower form keeps its role whatever the flags say.
    assert_eq!(role(&["roles", "runner", "--headless"]), Some(Role::Runner));
    for (rank, expected) in [
        ("0", Role::Server),
        ("00", Role::Server),
        ("1", Role::Follower),
        ("01", Role::Follower),
        ("15", Role::Follower),
        ("+1", Role::Server),
        ("$RANK", Role::Server),
        ("", Role::Server),
        ("-1", Role::Server),
    ] {
        assert_eq!(
            role(&["roles", "serve", "--node-rank", rank]),
            Some(expected),
            "{rank:?}"
        );
        let inline = format!("--node_rank={rank}");
        assert_eq!(
            role(&["roles", "serve", &inline]),
            Some(expected),
            "{inline}"
        );
    }
    // The last occurrence wins; the first flag in priority order with a value decides.
    assert_eq!(
        role(&["roles", "serve", "--node-rank", "1", "--node-rank", "0"]),
        Some(Role::Server)
    );
    assert_eq!(
        role(&["roles", "serve", "--rank", "1", "--node-rank", "0"]),
        Some(Role::Server)
    );
    assert_eq!(
        role(&["roles", "serve", "--rank", "1"]),
        Some(Role::Follower)
    );
    assert_eq!(parse(&["demo", "serve", "m"]).unwrap().role, Role::Server);
    assert_eq!(Role::Follower.as_str(), "follower");
}

#[test]
fn executable_prefixes_name_renamed_builds() {
    for name in [
        "roles-server-b5678",
        "/opt/bin/roles-server-cuda",
        "roles-server-1.2.3",
        "roles-server-x86_64",
        "roles-server-a-b_c.9",
        "roles-server-x.",
        "C:\\bin\\roles-server-vulkan.exe",
        "roles-server-rocm.EXE",
    ] {
        assert_eq!(parse(&[name]).map(|p| p.engine), Some(2), "{name}");
    }
    for name in [
        "roles-server-",
        "roles-server",
        "roles-serverless",
        "roles-server-wrapper.sh",
        "roles-server-8080.log",
        "roles-server-a b",
        "roles-server-é",
        "roles-server-a/b",
        "xroles-server-1",
        "roles-server-.exe",
    ] {
        assert_eq!(parse(&[name]), None, "{name}");
    }
    // Through an interpreter too, as executables are (a console script of that name).
    assert_eq!(
        parse(&["python3", "/v/bin/roles-server-b1", "-m", "m"]).map(|p| p.engine),
        Some(2)
    );
}

#[test]
fn evidence_is_needed_and_otherwise_the_next_form_is_tried() {
    let engine = |argv: &[&str]| parse(argv).map(|p| p.engine);
    assert_eq!(engine(&["server", "-m", "a.bin", "-l", "3"]), Some(2));
    assert_eq!(engine(&["./server", "-m", "A.BIN", "--layers=3"]), Some(2));
    assert_eq!(
        engine(&["server.exe", "--model", "a.bin", "--mlock"]),
        Some(2)
    );
    assert_eq!(
        engine(&["server", "--mlock", "--model_x", "1", "-m", "a.bin"]),
        Some(2)
    );
    // Missing either half of the evidence: not `roles`, but the next engine's `server` form.
    assert_eq!(engine(&["server", "-m", "a.bin"]), Some(3));
    assert_eq!(engine(&["server", "-m", "a.gguf", "-l", "3"]), Some(3));
    assert_eq!(engine(&["server", "--port", "8080"]), Some(3));
    // An exit flag counts only for a form whose evidence is found.
    assert_eq!(
        engine(&["server", "-m", "a.bin", "-l", "3", "--help"]),
        None
    );
    assert_eq!(
        engine(&["server", "--help", "-m", "a.bin", "--mlock"]),
        None
    );
    assert_eq!(engine(&["server", "--help"]), Some(3));
    let m = Matcher::from_json(
        r#"[{"engine":"e","launch_forms":[{"executables":["s"],"evidence":{"any_flags":["-x"]}}]}]"#,
    )
    .unwrap();
    let argv: Vec<&[u8]> = vec![b"s", b"-y"];
    assert_eq!(m.parse(&argv), None);
    let argv: Vec<&[u8]> = vec![b"s", b"-x"];
    assert_eq!(m.parse(&argv).map(|p| p.model), Some(None));
}

#[test]
fn a_default_subcommand_is_not_taken_for_another_command() {
    // `group MODEL` means `group serve MODEL`, unless MODEL names another command.
    assert_eq!(model(&["group", "m"]).as_deref(), Some("m"));
    assert_eq!(model(&["group", "serve", "m"]).as_deref(), Some("m"));
    assert_eq!(model(&["group", "serve"]), None);
    assert!(parse(&["group", "route", "-c", "x"]).is_none());
    assert_eq!(model(&["group", "router"]).as_deref(), Some("router"));
    assert!(parse(&["group", "m", "--help"]).is_none());
}

#[test]
fn a_missing_value_is_a_usage_error_where_values_are_required() {
    assert_eq!(
        model(&["strict", "--model", "m", "--flag"]).as_deref(),
        Some("m")
    );
    assert_eq!(
        model(&["strict", "--other=", "--model", "m"]).as_deref(),
        Some("m")
    );
    assert_eq!(
        model(&["strict", "--other", "-1", "--model", "m"]).as_deref(),
        Some("m")
    );
    assert!(parse(&["strict", "--model", "m", "--other"]).is_none());
    assert!(parse(&["strict", "--other", "--model", "m"]).is_none());
    assert!(parse(&["strict", "--model"]).is_none());
    // short flags may carry their value attached (`-p8080`): left alone
    assert_eq!(
        model(&["strict", "-p8080", "--model", "m"]).as_deref(),
        Some("m")
    );
    // elsewhere a flag without a value is only a flag
    assert_eq!(
        model(&["other-server", "--model", "m", "--other"]).as_deref(),
        Some("m")
    );
}

#[test]
fn too_many_evidence_flags_are_refused() {
    let flags: Vec<String> = (0..=MAX_EVIDENCE_FLAGS)
        .map(|i| format!("\"--f{i}\""))
        .collect();
    let json = format!(
        r#"[{{"engine":"e","launch_forms":[{{"executables":["s"],"evidence":{{"any_flags":[{}]}}}}]}}]"#,
        flags.join(",")
    );
    assert!(Matcher::from_json(&json).is_err());
}

const WRAPPED: &str = r#"[
  {"engine": "plain",
   "launch_forms": [{"executables": ["srv"]}],
   "model_flags": ["--model"]},
  {"engine": "wrapped",
   "launch_forms": [
     {"executables": ["srv"], "directories": ["lib/wrapped"], "role": "runner"},
     {"executables": ["tool"], "loaders": ["ld"], "loader_prefixes": [".ld-"],
      "subcommand": ["serve"], "no_arguments": true},
     {"executable_suffixes": [".pack"], "loaders": ["ld"], "program_model": true},
     {"executables": ["kb"], "positional_model": true, "positional_port": true,
      "exit_subcommands": ["download"]}
   ],
   "model_flags": ["--model"],
   "host_flags": ["--host"],
   "port_flags": ["--port"],
   "address_flags": ["-l"],
   "mode_flags": {"--serve": true, "--cli": false},
   "modeless_exit_flags": ["-p"]}
]"#;

/// (engine, model, host, port, role) of argv against [`WRAPPED`].
type Found = (usize, Option<String>, Option<String>, Option<u16>, Role);

fn wrapped(argv: &[&str]) -> Option<Found> {
    let matcher = Matcher::from_json(WRAPPED).expect("test signatures are valid");
    let text = |v: Option<&[u8]>| v.map(|b| String::from_utf8_lossy(b).into_owned());
    matcher
        .parse(argv)
        .map(|p| (p.engine, text(p.model), text(p.host), p.port, p.role))
}

#[test]
fn a_directory_bound_form_comes_first() {
    assert_eq!(
        wrapped(&["/usr/lib/wrapped/srv"]).map(|p| (p.0, p.4)),
        Some((1, Role::Runner))
    );
    assert_eq!(
        wrapped(&["C:\\x\\lib\\wrapped\\srv.exe"]).map(|p| p.0),
        Some(1)
    );
    assert_eq!(wrapped(&["/usr/lib//wrapped/srv"]).map(|p| p.0), Some(1));
    for elsewhere in [
        "srv",
        "/usr/lib/wrapped2/srv",
        "/wrapped/srv",
        "/lib/wrapped",
    ] {
        assert_eq!(
            wrapped(&[elsewhere]).map(|p| p.0),
            Some(0).filter(|_| elsewhere.ends_with("srv"))
        );
    }
}

#[test]
fn loaders_run_the_program_named_next() {
    assert!(wrapped(&["ld", "/bin/tool", "serve"]).is_some());
    assert!(wrapped(&["/home/u/.ld-1.10", "tool", "serve"]).is_some());
    assert!(wrapped(&["tool", "serve"]).is_some());
    // `serve` takes no arguments; a loader of another form, a script name, no program: nothing
    assert_eq!(wrapped(&["tool", "serve", "--x"]), None);
    assert_eq!(wrapped(&[".ld-1.sh", "tool", "serve"]), None);
    assert_eq!(wrapped(&["ld"]), None);
    assert_eq!(wrapped(&["ld", "vim", "serve"]), None);
    assert_eq!(wrapped(&["/x/.ld-2", "/m/a.pack"]), None); // .pack accepts `ld` only
    let packed = wrapped(&["ld", "/m/a.pack", "--serve"]).expect("a packed program");
    assert_eq!(packed.1.as_deref(), Some("/m/a.pack"));
    assert_eq!(
        wrapped(&["a.pack", "--model", "b"])
            .and_then(|p| p.1)
            .as_deref(),
        Some("b")
    );
    assert_eq!(wrapped(&[".pack"]), None);
}

#[test]
fn modes_the_last_one_decides() {
    assert!(wrapped(&["a.pack"]).is_some());
    assert_eq!(wrapped(&["a.pack", "-p", "x"]), None);
    assert!(wrapped(&["a.pack", "-p", "x", "--serve"]).is_some());
    assert_eq!(wrapped(&["a.pack", "--serve", "--cli"]), None);
    assert!(wrapped(&["a.pack", "--cli", "--serve"]).is_some());
}

#[test]
fn addresses_and_positional_ports() {
    let at = |v: &str| wrapped(&["a.pack", "-l", v]).map(|p| (p.2, p.3));
    assert_eq!(at("h:1"), Some((Some("h".into()), Some(1))));
    assert_eq!(at("[::1]:2"), Some((Some("::1".into()), Some(2))));
    assert_eq!(at(":3"), Some((None, Some(3))));
    assert_eq!(at("a:b:c"), Some((None, None)));
    assert_eq!(at("[::1]"), Some((None, None)));
    assert_eq!(at("h:99999"), Some((Some("h".into()), None)));
    let both = wrapped(&["a.pack", "-l", "h:1", "--port", "2", "--host", "g"]).map(|p| (p.2, p.3));
    assert_eq!(both, Some((Some("g".into()), Some(2))));
    let kb = wrapped(&["kb", "m.gguf", "5001"]).expect("kb");
    assert_eq!((kb.1.as_deref(), kb.3), (Some("m.gguf"), Some(5001)));
    assert_eq!(
        wrapped(&["kb", "m", "--port", "7", "8"]).map(|p| p.3),
        Some(Some(7))
    );
    assert_eq!(wrapped(&["kb", "download", "m"]), None);
    assert!(wrapped(&["kb", "m", "download"]).is_some());
}

#[test]
fn bad_json_is_an_error() {
    assert!(Matcher::from_json("{").is_err());
    assert!(Matcher::from_json("[{\"engine\": 1}]").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn never_panics_on_arbitrary_bytes(argv in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..12)) {
        let _ = matcher().parse(&argv);
    }

    #[test]
    fn never_panics_on_engine_prefixed_noise(
        rest in prop::collection::vec(
            prop_oneof![
                Just(b"--".to_vec()), Just(b"-m".to_vec()), Just(b"--port=".to_vec()),
                Just(b"--many".to_vec()), Just(b"-a".to_vec()), Just(b"-".to_vec()),
                Just(b"--help".to_vec()), Just(b"--node-rank".to_vec()), Just(b"--headless".to_vec()),
                Just(b"-l".to_vec()), Just(b"a.bin".to_vec()), Just(b"--rank=".to_vec()),
                prop::collection::vec(any::<u8>(), 0..6),
            ],
            0..16,
        ),
        head in prop_oneof![
            Just(vec![b"demo".to_vec(), b"serve".to_vec()]),
            Just(vec![b"roles".to_vec(), b"serve".to_vec()]),
            Just(vec![b"server".to_vec()]),
            Just(vec![b"roles-server-1".to_vec()]),
            Just(vec![b"python".to_vec(), b"-m".to_vec(), b"demo.server".to_vec()]),
            Just(vec![b"python".to_vec()]),
        ],
    ) {
        let argv: Vec<Vec<u8>> = head.into_iter().chain(rest).collect();
        let _ = matcher().parse(&argv);
    }
}

const ISSUE_27: &str = r#"[
  {"engine": "strictpos",
   "launch_forms": [
     {"executables": ["launcher"], "max_positionals": 0},
     {"executables": ["one"], "positional_model": true, "max_positionals": 1},
     {"executables": ["peer"], "role": "follower", "facts": false,
      "host_flags": ["-H", "--host"], "port_flags": ["-p", "--port"]},
     {"modules": ["pkg.leader"], "role": "follower"},
     {"any_program": true, "loaders": ["ld"], "loader_prefixes": [".ld-"], "program_model": true,
      "evidence": {"any_flags": ["--serve"]}}
   ],
   "model_flags": ["--model"],
   "no_value_flags": ["--serve", "--bool"],
   "exit_flags": ["--help"],
   "exit_values": {"--action": ["stop"]}}
]"#;

/// (model, host, port, role) of an argv.
type Facts = (Option<String>, Option<String>, Option<u16>, Role);

/// (model, host, port, role) of argv against [`ISSUE_27`].
fn issue_27(argv: &[&str]) -> Option<Facts> {
    let matcher = Matcher::from_json(ISSUE_27).expect("valid");
    let text = |v: Option<&[u8]>| v.map(|b| String::from_utf8_lossy(b).into_owned());
    matcher
        .parse(argv)
        .map(|p| (text(p.model), text(p.host), p.port, p.role))
}

#[test]
fn a_strict_parser_refuses_extra_positionals() {
    assert!(issue_27(&["launcher", "--model", "m"]).is_some());
    assert!(issue_27(&["launcher", "--model", "m", "--bool"]).is_some());
    assert!(issue_27(&["launcher", "--model", "m", " "]).is_none());
    assert!(issue_27(&["launcher", "/bin/sh", "-c", "x"]).is_none());
    assert!(issue_27(&["launcher", "--bool", "x"]).is_none());
    assert!(issue_27(&["launcher", "--", "x"]).is_none());
    assert_eq!(
        issue_27(&["one", "m", "--bool"]).map(|f| f.0),
        Some(Some("m".into()))
    );
    assert!(issue_27(&["one", "m", "n"]).is_none());
    assert!(issue_27(&["one", "--", "m", "n"]).is_none());
}

#[test]
fn an_exit_value_exits_and_the_last_value_decides() {
    let follower = Some((None, None, None, Role::Follower));
    assert_eq!(issue_27(&["python3", "-m", "pkg.leader"]), follower);
    assert_eq!(
        issue_27(&["python3", "-m", "pkg.leader", "--action", "start"]),
        follower
    );
    assert!(issue_27(&["python3", "-m", "pkg.leader", "--action", "stop"]).is_none());
    assert!(issue_27(&["python3", "-m", "pkg.leader", "--action=stop"]).is_none());
    assert_eq!(
        issue_27(&[
            "python3",
            "-m",
            "pkg.leader",
            "--action",
            "stop",
            "--action=start"
        ]),
        follower
    );
}

#[test]
fn a_programs_own_address_flags() {
    assert_eq!(
        issue_27(&["peer", "-H", "0.0.0.0", "-p", "50052"]),
        Some((None, Some("0.0.0.0".into()), Some(50052), Role::Follower))
    );
    // the next argument is the value, whatever it is; the last occurrence wins
    assert_eq!(
        issue_27(&["peer", "--host", "--help", "-p", "1", "--port", "2"]),
        Some((None, Some("--help".into()), Some(2), Role::Follower))
    );
    assert!(issue_27(&["peer", "-H"]).is_none());
    assert!(issue_27(&["peer", "-p", "1", "--help"]).is_none());
    assert_eq!(
        issue_27(&["peer", "-p", "99999", "-H", ""]),
        Some((None, None, None, Role::Follower))
    );
}

#[test]
fn a_loaders_program_of_any_name_needs_the_evidence() {
    assert_eq!(
        issue_27(&["/x/.ld-1.10", "./model", "--serve"]).map(|f| f.0),
        Some(Some("./model".into()))
    );
    assert_eq!(
        issue_27(&["ld", "/srv/m", "--serve", "--model", "w"]).map(|f| f.0),
        Some(Some("w".into()))
    );
    assert!(issue_27(&["ld", "./model"]).is_none());
    assert!(issue_27(&["ld", "-x", "--serve"]).is_none());
    assert!(issue_27(&["./model", "--serve"]).is_none());
    assert!(issue_27(&["ldx", "./model", "--serve"]).is_none());
}

#[test]
fn global_options_before_the_subcommand_are_passed_over() {
    assert_eq!(model(&["globals", "serve", "m"]).as_deref(), Some("m"));
    assert_eq!(
        model(&["globals", "--runtime=x", "serve", "m"]).as_deref(),
        Some("m")
    );
    assert_eq!(
        model(&["globals", "--runtime", "x", "--debug", "serve", "m"]).as_deref(),
        Some("m")
    );
    // a leading exit flag exits; an unknown global, a joined switch or a missing value: no form
    assert!(parse(&["globals", "--dryrun", "serve", "m"]).is_none());
    assert!(parse(&["globals", "--other", "serve", "m"]).is_none());
    assert!(parse(&["globals", "--debug=1", "serve", "m"]).is_none());
    assert!(parse(&["globals", "--runtime"]).is_none());
    assert!(parse(&["globals", "--runtime", "serve", "m"]).is_none());
}
