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
   "model_flags": ["--model"]}
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
                Just(b"--help".to_vec()), prop::collection::vec(any::<u8>(), 0..6),
            ],
            0..16,
        ),
        head in prop_oneof![
            Just(vec![b"demo".to_vec(), b"serve".to_vec()]),
            Just(vec![b"python".to_vec(), b"-m".to_vec(), b"demo.server".to_vec()]),
            Just(vec![b"python".to_vec()]),
        ],
    ) {
        let argv: Vec<Vec<u8>> = head.into_iter().chain(rest).collect();
        let _ = matcher().parse(&argv);
    }
}
