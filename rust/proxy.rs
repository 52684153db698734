//! What a userland port proxy forwards, from its argv: Docker's `docker-proxy -proto tcp
//! -host-ip 0.0.0.0 -host-port 8001 -container-ip 172.17.0.2 -container-port 8000`. A pure
//! function over argv (the twin of `proxy_flags` in `python/enginespec/_host/fallback/proxy.py`).
//!
//! The argv is untrusted (any user can name a process `docker-proxy`): ports are only plain
//! decimal 1-65535; the addresses are handed back as given, for the caller to validate.

/// The forward a `docker-proxy` argv sets up: host address and port -> container address and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyFlags {
    pub host_ip: Vec<u8>,
    pub host_port: u16,
    pub container_ip: Vec<u8>,
    pub container_port: u16,
}

const FLAGS: [&[u8]; 5] = [
    b"proto",
    b"host-ip",
    b"host-port",
    b"container-ip",
    b"container-port",
];

/// A port in plain decimal ASCII digits, 1-65535.
fn port(text: &[u8]) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text)
        .ok()?
        .parse()
        .ok()
        .filter(|&p| p > 0)
}

/// The TCP forward of a `docker-proxy` argv, or `None`. Flags take Go's `flag` package forms
/// (`-name value`, `-name=value`, one or two dashes; the last one given wins) and `-proto`
/// defaults to `tcp` (moby cmd/docker-proxy/main.go, parseFlags, at 4be37b1); other arguments
/// are passed over.
pub fn proxy_flags(argv: &[&[u8]]) -> Option<ProxyFlags> {
    let program = argv.first()?;
    if program.rsplit(|&b| b == b'/').next() != Some(&b"docker-proxy"[..]) {
        return None;
    }
    let mut values: [Option<&[u8]>; 5] = [Some(b"tcp"), None, None, None, None];
    let mut args = argv[1..].iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix(b"--").or_else(|| arg.strip_prefix(b"-")) else {
            continue;
        };
        let (name, value) = match flag.iter().position(|&b| b == b'=') {
            Some(at) => (&flag[..at], Some(&flag[at + 1..])),
            None => (flag, None),
        };
        if let Some(index) = FLAGS.iter().position(|known| *known == name) {
            values[index] = Some(value.unwrap_or_else(|| args.next().copied().unwrap_or(b"")));
        }
    }
    if values[0] != Some(&b"tcp"[..]) {
        return None;
    }
    Some(ProxyFlags {
        host_ip: values[1]?.to_vec(),
        host_port: port(values[2]?)?,
        container_ip: values[3]?.to_vec(),
        container_port: port(values[4]?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(argv: &[&str]) -> Option<(String, u16, String, u16)> {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        proxy_flags(&argv).map(|f| {
            let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8 test input");
            (
                text(f.host_ip),
                f.host_port,
                text(f.container_ip),
                f.container_port,
            )
        })
    }

    #[test]
    fn as_dockerd_writes_it() {
        let argv = [
            "/usr/bin/docker-proxy",
            "-proto",
            "tcp",
            "-host-ip",
            "0.0.0.0",
            "-host-port",
            "8001",
            "-container-ip",
            "172.17.0.2",
            "-container-port",
            "8000",
        ];
        let expected = Some(("0.0.0.0".to_string(), 8001, "172.17.0.2".to_string(), 8000));
        assert_eq!(flags(&argv), expected);
        let equals = [
            "docker-proxy",
            "--host-ip=::",
            "-host-port=1",
            "-container-ip",
            "a",
            "-container-port",
            "2",
        ];
        assert_eq!(
            flags(&equals),
            Some(("::".to_string(), 1, "a".to_string(), 2))
        );
    }

    #[test]
    fn refused() {
        let tail = [
            "-host-ip",
            "h",
            "-host-port",
            "1",
            "-container-ip",
            "c",
            "-container-port",
        ];
        for (program, proto, port) in [
            ("docker-proxy", "udp", "2"),
            ("docker-proxyx", "tcp", "2"),
            ("docker-proxy", "tcp", "0"),
            ("docker-proxy", "tcp", "65536"),
            ("docker-proxy", "tcp", "+2"),
            ("docker-proxy", "tcp", ""),
        ] {
            let argv: Vec<&str> = [program, "-proto", proto]
                .into_iter()
                .chain(tail)
                .chain([port])
                .collect();
            assert_eq!(flags(&argv), None, "{argv:?}");
        }
        assert_eq!(flags(&[]), None);
        assert_eq!(flags(&["docker-proxy", "-host-ip"]), None);
    }
}
