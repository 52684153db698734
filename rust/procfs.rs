//! Parsers of what procfs gives (its text files, and the `getdents64` records of its listing),
//! kept apart from the scanner's I/O so each is a pure, allocation-light function over `&[u8]`
//! that a fuzzer can call directly.
//!
//! Everything read from `/proc` is untrusted (another user's process controls its own argv and
//! `comm`), so no input may panic here: every index is bounds-checked and nothing is unwrapped.

/// Splits `/proc/PID/cmdline` into argv: NUL separated, one trailing NUL dropped, empty -> [].
pub fn split_cmdline(data: &[u8]) -> Vec<&[u8]> {
    if data.is_empty() {
        return Vec::new();
    }
    let data = data.strip_suffix(b"\0").unwrap_or(data);
    data.split(|&b| b == 0).collect()
}

/// At most this many arguments of a process's argv are examined and kept by a scan: what one
/// process costs must not grow with an argv of 100,000 arguments (the kernel takes up to 2 MiB).
pub const MAX_ARGV_ARGS: usize = 1024;
/// At most this many bytes of argv (each argument with its NUL) are examined and kept.
pub const MAX_ARGV_BYTES: usize = 256 * 1024;
/// The last element of a kept argv that the process's goes on beyond (a NUL, which no argument
/// read from `cmdline` can hold).
pub const ARGV_CUT: &[u8] = b"\0";

/// The argv a scan examines: `cmdline` split as [`split_cmdline`] does, capped by [`cap_args`];
/// and whether it was cut.
pub fn capped_argv(data: &[u8]) -> (Vec<&[u8]>, bool) {
    if data.is_empty() {
        return (Vec::new(), false);
    }
    let data = data.strip_suffix(b"\0").unwrap_or(data);
    cap_args(data.split(|&b| b == 0))
}

/// The first [`MAX_ARGV_ARGS`] arguments within [`MAX_ARGV_BYTES`] (each with its NUL), and
/// whether any was left out; the rest is not looked at.
pub fn cap_args<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> (Vec<&'a [u8]>, bool) {
    let mut kept = Vec::new();
    let mut size = 0usize;
    for part in args {
        size += part.len() + 1;
        if kept.len() == MAX_ARGV_ARGS || size > MAX_ARGV_BYTES {
            return (kept, true);
        }
        kept.push(part);
    }
    (kept, false)
}

/// A decimal number, surrounding whitespace allowed (procfs files end with `\n`).
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// What the scanner needs from `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// One letter: `R`, `S`, `Z` (zombie), `X` (dead), ...
    pub state: u8,
    pub ppid: i32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
    /// The command name (`comm`), which `exec` and `prctl(PR_SET_NAME)` change.
    pub comm: Vec<u8>,
    /// Where argv lies in the process's memory (`arg_start`, `arg_end`), which `exec` moves.
    /// `None` before Linux 3.5; `(0, 0)` when the reader may not ptrace the process.
    pub args: Option<(u64, u64)>,
}

impl ProcStat {
    /// A zombie (`Z`) or dead (`X`) process: whatever its argv says, it serves nothing.
    pub fn is_dead(&self) -> bool {
        self.state == b'Z' || self.state == b'X'
    }
}

/// Parses `/proc/PID/stat`. The command name between the parentheses is chosen by the process
/// (`prctl(PR_SET_NAME)`) and may contain spaces and `)`, so fields are counted from the last `)`.
pub fn parse_stat(data: &[u8]) -> Option<ProcStat> {
    let open = data.iter().position(|&b| b == b'(')?;
    let close = data.iter().rposition(|&b| b == b')')?;
    let comm = data.get(open + 1..close)?.to_vec();
    let mut fields = data
        .get(close + 1..)?
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let ppid = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    // starttime is field 22; state was field 3 and ppid field 4.
    let start_ticks = parse_u64(fields.nth(17)?)?;
    // arg_start and arg_end are fields 48 and 49.
    let arg_start = fields.nth(25).and_then(parse_u64);
    let arg_end = fields.next().and_then(parse_u64);
    Some(ProcStat {
        state,
        ppid,
        start_ticks,
        comm,
        args: arg_start.zip(arg_end),
    })
}

/// The value of the `key` line of `/proc/stat` (`btime`, `processes`, ...).
pub fn proc_stat_value(data: &[u8], key: &[u8]) -> Option<u64> {
    data.split(|&b| b == b'\n').find_map(|line| {
        line.strip_prefix(key)
            .filter(|rest| rest.first().is_some_and(u8::is_ascii_whitespace))
            .and_then(parse_u64)
    })
}

/// The pids listed in `/proc/PID/task/TID/children` (space separated decimals); anything else,
/// including `0`, signs and numbers beyond `i32`, is skipped rather than walked.
pub fn parse_children(data: &[u8]) -> impl Iterator<Item = i32> + '_ {
    data.split(|b| b.is_ascii_whitespace())
        .filter(|token| !token.is_empty() && token.iter().all(u8::is_ascii_digit))
        .filter_map(|token| std::str::from_utf8(token).ok()?.parse().ok())
        .filter(|&pid| pid > 0)
}

/// The `NAME=value` entries of a read of `/proc/PID/environ` (NUL separated) whose name is one of
/// `names`, in their order, repeats kept (a process may hold a name twice; each reader of it
/// decides which counts). `cut`: the read stopped short of the file's end, so its last entry,
/// cut there, is left out. Entries without `=` are no variables and are skipped.
pub fn environ_entries<'a>(
    data: &'a [u8],
    cut: bool,
    names: &[Vec<u8>],
) -> Vec<(&'a [u8], &'a [u8])> {
    let whole = if cut {
        data.iter()
            .rposition(|&b| b == 0)
            .and_then(|end| data.get(..end))
            .unwrap_or_default()
    } else {
        data
    };
    whole
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let mut parts = entry.splitn(2, |&b| b == b'=');
            let name = parts.next()?;
            let value = parts.next()?;
            names.iter().any(|n| n == name).then_some((name, value))
        })
        .collect()
}

/// The credentials the kernel checks a process's file accesses with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Filesystem uid and gid.
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The owner `/proc/PID/status` gives: the filesystem uid and gid (the fourth of the `Uid:` and
/// `Gid:` fields: real, effective, saved, filesystem) and the `Groups:` line; `None` when a line
/// is missing or malformed.
pub fn parse_owner(status: &[u8]) -> Option<Owner> {
    let line = |key: &[u8]| {
        status
            .split(|&b| b == b'\n')
            .find_map(|line| line.strip_prefix(key))
            .map(|rest| {
                rest.split(|b| b.is_ascii_whitespace())
                    .filter(|field| !field.is_empty())
            })
    };
    let id = |key: &[u8]| {
        let value = line(key)?.nth(3)?;
        u32::try_from(parse_u64(value)?).ok()
    };
    let groups = line(b"Groups:")?
        .map(|group| u32::try_from(parse_u64(group)?).ok())
        .collect::<Option<Vec<u32>>>()?;
    Some(Owner {
        uid: id(b"Uid:")?,
        gid: id(b"Gid:")?,
        groups,
    })
}

/// The socket inode of a `/proc/PID/fd/N` link target `socket:[INODE]`; `None` for other files.
pub fn parse_socket_link(target: &[u8]) -> Option<u64> {
    target
        .strip_prefix(b"socket:[")?
        .strip_suffix(b"]")
        .and_then(parse_u64)
}

/// Whether a `/proc/PID/fd/N` link target names a device node worth a stat: a path in `/dev`
/// (the process's own, in a container; below `host`, a fixture host's directory, when its links
/// name its own `/dev`) but not a terminal, `/dev/null`, or a `/dev/shm` or `/dev/mqueue` file.
/// Only those are followed: reading a link never reaches the file's filesystem, a stat does.
/// `_host.procfiles.device_link`.
pub fn is_device_link(target: &[u8], host: &[u8]) -> bool {
    let target = match target.strip_prefix(host) {
        Some(inside) if !host.is_empty() && inside.starts_with(b"/") => inside,
        _ => target,
    };
    let Some(name) = target.strip_prefix(b"/dev/") else {
        return false; // socket:[...], pipe:[...], anon_inode:..., files elsewhere
    };
    !(name.starts_with(b"shm/")
        || name.starts_with(b"pts/")
        || name.starts_with(b"mqueue/")
        || name == b"null")
}

/// TCP state `TCP_LISTEN` as `/proc/net/tcp` prints it.
const TCP_LISTEN: &[u8] = b"0A";

/// One LISTEN socket of a `/proc/PID/net/tcp` or `tcp6` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpListen {
    pub inode: u64,
    /// The local address in network byte order: 4 bytes (tcp) or 16 (tcp6).
    pub address: Vec<u8>,
    pub port: u16,
}

/// Every LISTEN socket of one `/proc/PID/net/tcp` or `tcp6` table. The header line and
/// malformed lines (an address that is not 8 or 32 hex digits included) are skipped.
pub fn parse_tcp_listen(table: &[u8]) -> impl Iterator<Item = TcpListen> + '_ {
    table.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        let mut fields = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let local = fields.nth(1)?;
        if fields.nth(1)? != TCP_LISTEN {
            return None;
        }
        let inode = parse_u64(fields.nth(5)?)?;
        let colon = local.iter().rposition(|&b| b == b':')?;
        let (address_hex, port_hex) = (local.get(..colon)?, local.get(colon + 1..)?);
        let port = u16::from_str_radix(std::str::from_utf8(port_hex).ok()?, 16).ok()?;
        let address = parse_tcp_address(address_hex)?;
        Some(TcpListen {
            inode,
            address,
            port,
        })
    })
}

/// The kernel prints an address as 32-bit words, each `%08X` of the word as it sits in memory
/// read as a host-order integer (`tcp4_seq_show`, `tcp6_seq_show`): each word's integer, put
/// back in host order, gives the network-order bytes.
fn parse_tcp_address(hex: &[u8]) -> Option<Vec<u8>> {
    if hex.len() != 8 && hex.len() != 32 {
        return None;
    }
    let mut address = Vec::with_capacity(hex.len() / 2);
    for word in hex.chunks(8) {
        let value = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        address.extend_from_slice(&value.to_ne_bytes());
    }
    Some(address)
}

/// The states of the rows the kernel prints first in a `/proc/PID/net/tcp{,6}` table, its
/// listening sockets: `TCP_LISTEN`, and a listener's pending requests (`SYN_RECV`, kernels before
/// 4.4) or one being closed (`TCP_CLOSE`), left in for safety. Then comes its walk of every bucket of
/// the established-connection hash, which prints no listener.
const LISTENING_PART: [&[u8]; 3] = [TCP_LISTEN, b"03", b"07"];

/// Whether a row of a `/proc/PID/net/tcp{,6}` table is in a state its listening part never
/// shows: no socket listed from that row on listens. A malformed row says nothing (`false`).
pub fn tcp_row_after_listening(row: &[u8]) -> bool {
    row.split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(3)
        .is_some_and(|state| !LISTENING_PART.contains(&state))
}

/// The address families a `NETLINK_SOCK_DIAG` request names.
pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;

/// `SOCK_DIAG_BY_FAMILY`, the netlink message type of `NETLINK_SOCK_DIAG` requests and answers.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_DONE: u16 = 3;
/// `TCP_LISTEN` as `tcp_states.h` numbers it.
const TCP_STATE_LISTEN: u8 = 10;

/// The `NETLINK_SOCK_DIAG` request for every TCP socket of `family` (`AF_INET`, `AF_INET6`) in
/// LISTEN state, as `ss -lt` makes it: an `nlmsghdr` (a dump request) then an
/// `inet_diag_req_v2` asking for that state alone, so the kernel walks its listening sockets
/// only, never the established-connection hash.
pub fn diag_listen_request(family: u8, seq: u32) -> Vec<u8> {
    const LEN: u32 = 16 + 56;
    let mut out = Vec::with_capacity(LEN as usize);
    out.extend_from_slice(&LEN.to_ne_bytes());
    out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    // NLM_F_REQUEST | NLM_F_DUMP
    out.extend_from_slice(&(0x1u16 | 0x300).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // family, IPPROTO_TCP, no extensions, padding, the states (a bit mask), a zeroed socket id
    out.extend_from_slice(&[family, 6, 0, 0]);
    out.extend_from_slice(&(1u32 << TCP_STATE_LISTEN).to_ne_bytes());
    out.resize(LEN as usize, 0);
    out
}

/// How one datagram of a `NETLINK_SOCK_DIAG` answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiagAnswer {
    /// More datagrams follow.
    More,
    /// `NLMSG_DONE`: the dump is complete.
    Done,
    /// An error message, a malformed message, or one of another request (`seq`).
    Failed,
}

/// Appends each LISTEN socket in one datagram answering [`diag_listen_request`]
/// (`inet_diag_msg` records: the family at 0, the port big-endian at 4, the address in network
/// order at 8, 4 or 16 bytes by family, the inode at 68).
pub fn parse_diag_listen(datagram: &[u8], seq: u32, out: &mut Vec<TcpListen>) -> DiagAnswer {
    let u32_at = |data: &[u8], at: usize| {
        data.get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_ne_bytes)
    };
    let mut rest = datagram;
    while !rest.is_empty() {
        let (Some(len), Some(kind), Some(got_seq)) = (
            u32_at(rest, 0),
            rest.get(4..6)
                .and_then(|b| <[u8; 2]>::try_from(b).ok())
                .map(u16::from_ne_bytes),
            u32_at(rest, 8),
        ) else {
            return DiagAnswer::Failed;
        };
        let len = len as usize;
        let Some(message) = rest.get(16..len).filter(|_| len >= 16) else {
            return DiagAnswer::Failed;
        };
        if got_seq != seq {
            return DiagAnswer::Failed;
        }
        match kind {
            NLMSG_DONE => return DiagAnswer::Done,
            SOCK_DIAG_BY_FAMILY => {
                let address_len = if message.first() == Some(&AF_INET6) {
                    16
                } else {
                    4
                };
                let (Some(&state), Some(port), Some(address), Some(inode)) = (
                    message.get(1),
                    message
                        .get(4..6)
                        .and_then(|b| <[u8; 2]>::try_from(b).ok())
                        .map(u16::from_be_bytes),
                    message.get(8..8 + address_len),
                    u32_at(message, 68),
                ) else {
                    return DiagAnswer::Failed;
                };
                if state == TCP_STATE_LISTEN {
                    out.push(TcpListen {
                        inode: u64::from(inode),
                        address: address.to_vec(),
                        port,
                    });
                }
            }
            // NLMSG_ERROR (2), or anything unexpected
            _ => return DiagAnswer::Failed,
        }
        // Messages are aligned to 4 bytes.
        rest = rest.get((len + 3) & !3..).unwrap_or_default();
    }
    DiagAnswer::More
}

/// Appends (pid, inode) for each all-digit name in `records`, a buffer of `linux_dirent64`
/// records as `getdents64` fills it from `/proc`. Returns `false` at a malformed record (the rest
/// of the buffer is then ignored), so a listing never loops on a zero record length.
pub fn parse_pid_dirents(records: &[u8], out: &mut Vec<(i32, u64)>) -> bool {
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    let mut rest = records;
    while !rest.is_empty() {
        let inode = rest.get(0..8).and_then(|b| <[u8; 8]>::try_from(b).ok());
        let reclen = rest.get(16..18).and_then(|b| <[u8; 2]>::try_from(b).ok());
        let (Some(inode), Some(reclen)) = (inode, reclen) else {
            return false;
        };
        let reclen = usize::from(u16::from_ne_bytes(reclen));
        // `get` also refuses a record shorter than its header (reclen < 19, 0 included).
        let Some(name) = rest.get(19..reclen) else {
            return false;
        };
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
            if let Some(pid) = std::str::from_utf8(name).ok().and_then(|n| n.parse().ok()) {
                out.push((pid, u64::from_ne_bytes(inode)));
            }
        }
        rest = rest.get(reclen..).unwrap_or_default();
    }
    true
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_owner_is_the_filesystem_ids_and_the_groups() {
        let status =
            b"Name:\tx\nUid:\t1000\t1001\t1002\t1003\nGid:\t20\t21\t22\t23\nGroups:\t4 24 27 \n";
        let owner = parse_owner(status).unwrap();
        assert_eq!(
            (owner.uid, owner.gid, owner.groups),
            (1003, 23, vec![4, 24, 27])
        );
        let none = b"Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        assert_eq!(parse_owner(none).unwrap().groups, Vec::<u32>::new());
        // A missing line or field, or a number that is no gid: not known.
        assert_eq!(parse_owner(b"Uid:\t0\t0\t0\t0\nGroups:\t\n"), None);
        assert_eq!(
            parse_owner(b"Uid:\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n"),
            None
        );
        assert_eq!(
            parse_owner(b"Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t99999999999\n"),
            None
        );
    }

    #[test]
    fn argv_is_capped() {
        assert_eq!(capped_argv(b""), (vec![], false));
        assert_eq!(
            capped_argv(b"a\0\0b\0"),
            (vec![&b"a"[..], b"", b"b"], false)
        );
        let many = b"x\0".repeat(MAX_ARGV_ARGS + 1);
        let (kept, cut) = capped_argv(&many);
        assert_eq!((kept.len(), cut), (MAX_ARGV_ARGS, true));
        let exact = b"x\0".repeat(MAX_ARGV_ARGS);
        assert!(!capped_argv(&exact).1);
        let big = [vec![b'a'; MAX_ARGV_BYTES - 2], b"\0b\0".to_vec()].concat();
        assert_eq!(capped_argv(&big), (vec![&big[..MAX_ARGV_BYTES - 2]], true));
    }

    #[test]
    fn environ_keeps_the_named_variables_in_order() {
        let names = [b"PORT".to_vec(), b"KEY".to_vec()];
        let data = b"PATH=/bin\0PORT=1\0KEY=\0PORT\0PORT=2=3\0PORTS=9\0";
        let found = environ_entries(data, false, &names);
        let expected: Vec<(&[u8], &[u8])> = vec![(b"PORT", b"1"), (b"KEY", b""), (b"PORT", b"2=3")];
        assert_eq!(found, expected);
        // A read that stopped short leaves out the entry it cut, even one that looks whole.
        let found = environ_entries(b"PORT=1\0PORT=20", true, &names);
        assert_eq!(found, vec![(&b"PORT"[..], &b"1"[..])]);
        assert!(environ_entries(b"PORT=1", true, &names).is_empty());
        assert!(environ_entries(data, false, &[]).is_empty());
    }

    #[test]
    fn cmdline_splitting() {
        assert!(split_cmdline(b"").is_empty());
        assert_eq!(split_cmdline(b"a\0b\0"), vec![&b"a"[..], b"b"]);
        assert_eq!(split_cmdline(b"a\0\0b\0"), vec![&b"a"[..], b"", b"b"]);
        assert_eq!(
            split_cmdline(b"VLLM::Worker TP0"),
            vec![&b"VLLM::Worker TP0"[..]]
        );
        assert_eq!(split_cmdline(b"\0"), vec![&b""[..]]);
    }

    #[test]
    fn stat_parsing_survives_odd_names() {
        let line =
            b"42 (we) ird (name)) S 7 42 42 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 123456 1 1\n";
        let expected = ProcStat {
            state: b'S',
            ppid: 7,
            start_ticks: 123456,
            comm: b"we) ird (name)".to_vec(),
            args: None,
        };
        assert_eq!(parse_stat(line), Some(expected));
        assert_eq!(parse_stat(b"42 (x) S"), None);
        assert_eq!(parse_stat(b""), None);
        assert_eq!(
            parse_stat(b"42 x) S 7 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1"),
            None
        );
        assert_eq!(
            parse_stat(b"42 (x) S -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 x"),
            None
        );
    }

    #[test]
    fn stat_gives_where_argv_lies() {
        // The 52 fields of a Linux 6 line: arg_start and arg_end are 48 and 49.
        let mut line = b"42 (idle) S 7".to_vec();
        for field in 5..=52 {
            line.extend_from_slice(format!(" {}", field * 10).as_bytes());
        }
        let stat = parse_stat(&line).unwrap();
        assert_eq!((stat.start_ticks, stat.args), (220, Some((480, 490))));
        assert_eq!(stat.comm, b"idle");
        // A process the reader may not ptrace shows zeros there.
        let hidden = String::from_utf8(line)
            .unwrap()
            .replace(" 480 490 ", " 0 0 ");
        assert_eq!(parse_stat(hidden.as_bytes()).unwrap().args, Some((0, 0)));
    }

    #[test]
    fn proc_stat_lines() {
        let stat = b"cpu  1 2 3\nbtime 1700000000\nprocesses 4242\nprocs_running 3\n";
        assert_eq!(proc_stat_value(stat, b"btime"), Some(1_700_000_000));
        assert_eq!(proc_stat_value(stat, b"processes"), Some(4242));
        // a key is a whole word: `procs` is not `procs_running`
        assert_eq!(proc_stat_value(stat, b"procs"), None);
        assert_eq!(proc_stat_value(b"btime x\n", b"btime"), None);
    }

    #[test]
    fn children_lists() {
        let pids: Vec<i32> = parse_children(b"12 345 x 99999999999 -3 +4 0 7\n").collect();
        assert_eq!(pids, vec![12, 345, 7]);
        assert_eq!(parse_children(b"").count(), 0);
    }

    #[test]
    fn socket_links() {
        assert_eq!(parse_socket_link(b"socket:[12345]"), Some(12345));
        assert_eq!(parse_socket_link(b"pipe:[12345]"), None);
        assert_eq!(parse_socket_link(b"socket:[12345"), None);
        assert_eq!(parse_socket_link(b"/dev/null"), None);
    }

    #[test]
    fn device_links() {
        assert!(is_device_link(b"/dev/nvidia0", b""));
        assert!(is_device_link(b"/dev/dri/renderD128", b""));
        assert!(is_device_link(b"/host/dev/kfd", b"/host"));
        assert!(is_device_link(b"/dev/kfd", b"/host"));
        for target in [
            &b"/dev/null"[..],
            b"/dev/pts/3",
            b"/dev/shm/torch_1",
            b"/dev/mqueue/q",
            b"/devices/x",
            b"socket:[5]",
            b"/home/u/dev/nvidia0",
            b"/hostdev/kfd",
            b"/host/dev/null",
            b"",
        ] {
            assert!(!is_device_link(target, b"/host"), "{target:?}");
        }
    }

    const TCP: &[u8] = b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 5002 1 0000000000000000 20 4 30 10 -1
   2: 00000000:ZZZZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5003 1 0000000000000000 100 0 0 10 0
   3: 00000000:0050 00000000:0000 0A
";

    fn inode_port(table: &[u8]) -> Vec<(u64, u16)> {
        parse_tcp_listen(table).map(|l| (l.inode, l.port)).collect()
    }

    #[test]
    fn tcp_tables() {
        assert_eq!(inode_port(TCP), vec![(5001, 8080)]);
        let loopback: Vec<Vec<u8>> = parse_tcp_listen(TCP).map(|l| l.address).collect();
        assert_eq!(loopback, vec![vec![127, 0, 0, 1]]);
        let tcp6 = b"  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2328 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6001 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(inode_port(tcp6), vec![(6001, 9000)]);
        let any: Vec<Vec<u8>> = parse_tcp_listen(tcp6).map(|l| l.address).collect();
        assert_eq!(any, vec![vec![0; 16]]);
        // a header alone, or nothing
        assert_eq!(parse_tcp_listen(b"  sl  local_address").count(), 0);
        assert_eq!(parse_tcp_listen(b"").count(), 0);
    }

    #[test]
    fn the_listening_part_of_a_tcp_table_ends_at_a_state_it_never_shows() {
        let rows: Vec<&[u8]> = TCP.split(|&b| b == b'\n').skip(1).collect();
        let after: Vec<bool> = rows.iter().map(|r| tcp_row_after_listening(r)).collect();
        // 0A listens, 01 is a connection, a malformed row or an empty one says nothing
        assert_eq!(after, vec![false, true, false, false, false]);
        let row =
            |state: &str| format!("   0: 0100007F:1F90 00000000:0000 {state} 00000000:00000000");
        for state in ["0A", "03", "07"] {
            assert!(!tcp_row_after_listening(row(state).as_bytes()), "{state}");
        }
        for state in ["01", "02", "06", "08", "0B"] {
            assert!(tcp_row_after_listening(row(state).as_bytes()), "{state}");
        }
    }

    /// One `inet_diag_msg` answer message: a socket of `state` on `port` with `inode`.
    fn diag_message(seq: u32, state: u8, port: u16, inode: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(16u32 + 72).to_ne_bytes());
        out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        out.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&[2, state, 0, 0]);
        out.extend_from_slice(&port.to_be_bytes());
        out.extend_from_slice(&[0, 0, 127, 0, 0, 1]); // the peer's port, then 127.0.0.1
        out.resize(16 + 68, 0);
        out.extend_from_slice(&inode.to_ne_bytes());
        out
    }

    #[test]
    fn sock_diag_answers() {
        let request = diag_listen_request(10, 7);
        assert_eq!(request.len(), 72);
        assert_eq!(request.get(16..18), Some(&[10u8, 6][..])); // AF_INET6, TCP
        assert_eq!(request.get(20..24), Some(&(1u32 << 10).to_ne_bytes()[..]));
        let mut found = Vec::new();
        let datagram = [
            diag_message(7, 10, 8080, 501),
            diag_message(7, 1, 40000, 502),
        ]
        .concat();
        assert_eq!(
            parse_diag_listen(&datagram, 7, &mut found),
            DiagAnswer::More
        );
        let inode_port = |found: &[TcpListen]| -> Vec<(u64, u16)> {
            found.iter().map(|l| (l.inode, l.port)).collect()
        };
        assert_eq!(inode_port(&found), vec![(501, 8080)]);
        assert_eq!(found[0].address, vec![127, 0, 0, 1]);
        let mut done = diag_message(7, 10, 0, 0);
        done.truncate(16);
        done[..4].copy_from_slice(&16u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        let datagram = [diag_message(7, 10, 9000, 503), done.clone()].concat();
        assert_eq!(
            parse_diag_listen(&datagram, 7, &mut found),
            DiagAnswer::Done
        );
        assert_eq!(inode_port(&found), vec![(501, 8080), (503, 9000)]);
        // another request's answer, an error, a truncated message, a length below the header
        assert_eq!(parse_diag_listen(&done, 8, &mut found), DiagAnswer::Failed);
        let mut error = done.clone();
        error[4..6].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse_diag_listen(&error, 7, &mut found), DiagAnswer::Failed);
        let message = diag_message(7, 10, 1, 1);
        assert_eq!(
            parse_diag_listen(&message[..80], 7, &mut found),
            DiagAnswer::Failed
        );
        let mut short = done;
        short[..4].copy_from_slice(&4u32.to_ne_bytes());
        assert_eq!(parse_diag_listen(&short, 7, &mut found), DiagAnswer::Failed);
        assert_eq!(found.len(), 2);
    }

    /// `linux_dirent64` records as the kernel lays them out (8-byte aligned lengths).
    fn dirents(entries: &[(&[u8], u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, inode) in entries {
            let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
            out.extend_from_slice(&inode.to_ne_bytes());
            out.extend_from_slice(&0i64.to_ne_bytes());
            out.extend_from_slice(&u16::try_from(reclen).unwrap().to_ne_bytes());
            out.push(4); // DT_DIR
            out.extend_from_slice(name);
            out.resize(out.len() + reclen - 19 - name.len(), 0);
        }
        out
    }

    #[test]
    fn pid_dirents() {
        let records = dirents(&[
            (b".", 1),
            (b"1", 10),
            (b"self", 11),
            (b"4242", 12),
            (b"99999999999", 13),
            (b"12a", 14),
        ]);
        let mut pids = Vec::new();
        assert!(parse_pid_dirents(&records, &mut pids));
        assert_eq!(pids, vec![(1, 10), (4242, 12)]);
        // a zero record length stops the walk instead of looping
        let mut zero = dirents(&[(b"7", 1)]);
        zero[16..18].copy_from_slice(&0u16.to_ne_bytes());
        assert!(!parse_pid_dirents(&zero, &mut pids));
        assert!(!parse_pid_dirents(
            &records[..records.len() - 1],
            &mut Vec::new()
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn parsers_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = split_cmdline(&data);
            let _ = parse_u64(&data);
            let _ = parse_stat(&data);
            let _ = proc_stat_value(&data, b"processes");
            let _ = parse_children(&data).count();
            let _ = parse_socket_link(&data);
            let _ = is_device_link(&data, b"/host");
            let _ = parse_tcp_listen(&data).count();
            let _ = parse_pid_dirents(&data, &mut Vec::new());
        }

        /// Arbitrary bytes around the characters the parsers split on, so the structured paths
        /// (a `)`, a `:`, the `0A` state, a `socket:[` prefix) are reached, not only rejected.
        #[test]
        fn parsers_never_panic_on_near_misses(parts in prop::collection::vec(
            prop_oneof![
                Just(b")".to_vec()), Just(b" ".to_vec()), Just(b"\n".to_vec()), Just(b":".to_vec()),
                Just(b"0A".to_vec()), Just(b"socket:[".to_vec()), Just(b"]".to_vec()),
                Just(b"processes ".to_vec()), Just(b"\0".to_vec()),
                prop::collection::vec(any::<u8>(), 0..8),
            ],
            0..40,
        )) {
            let data = parts.concat();
            let _ = split_cmdline(&data);
            let _ = parse_stat(&data);
            let _ = proc_stat_value(&data, b"processes");
            let _ = parse_children(&data).count();
            let _ = parse_socket_link(&data);
            let _ = parse_tcp_listen(&data).count();
        }

        #[test]
        fn pid_dirents_round_trip(entries in prop::collection::vec(
            (prop_oneof![
                (1i32..i32::MAX).prop_map(|p| p.to_string().into_bytes()),
                prop::collection::vec(1u8..=255, 1..20),
            ], any::<u64>()),
            0..30,
        )) {
            let borrowed: Vec<(&[u8], u64)> = entries.iter().map(|(n, i)| (&n[..], *i)).collect();
            let expected: Vec<(i32, u64)> = entries
                .iter()
                .filter_map(|(name, inode)| {
                    let digits = std::str::from_utf8(name)
                        .ok()
                        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))?;
                    Some((digits.parse().ok()?, *inode))
                })
                .collect();
            let mut pids = Vec::new();
            prop_assert!(parse_pid_dirents(&dirents(&borrowed), &mut pids));
            prop_assert_eq!(pids, expected);
        }

        /// Whatever the process named itself, the fields after it are found; kernels before 3.5
        /// end the line before argv's place.
        #[test]
        fn stat_round_trip(
            comm in prop::collection::vec(any::<u8>(), 0..20),
            ppid in 0i32..i32::MAX,
            start_ticks in any::<u64>(),
            args in proptest::option::of((any::<u64>(), any::<u64>())),
        ) {
            let mut line = b"42 (".to_vec();
            line.extend_from_slice(&comm);
            line.extend_from_slice(format!(") S {ppid}").as_bytes());
            for field in 5..=52 {
                let value = match (field, args) {
                    (22, _) => start_ticks,
                    (48, Some((start, _))) => start,
                    (49, Some((_, end))) => end,
                    (48.., None) => break,
                    _ => 0,
                };
                line.extend_from_slice(format!(" {value}").as_bytes());
            }
            let expected = ProcStat { state: b'S', ppid, start_ticks, comm, args };
            prop_assert_eq!(parse_stat(&line), Some(expected));
        }

        #[test]
        fn children_round_trip(pids in prop::collection::vec(1i32..i32::MAX, 0..20)) {
            let text: String = pids.iter().map(|p| format!("{p} ")).collect();
            prop_assert_eq!(parse_children(text.as_bytes()).collect::<Vec<_>>(), pids);
        }

        #[test]
        fn tcp_listen_round_trip(rows in prop::collection::vec((any::<u16>(), any::<bool>(), 1u64..u64::MAX), 0..10)) {
            let mut table = String::from("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n");
            for (i, (port, listening, inode)) in rows.iter().enumerate() {
                let state = if *listening { "0A" } else { "01" };
                table.push_str(&format!(
                    "{i:4}: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
                ));
            }
            let expected: Vec<(u64, u16)> = rows.iter().filter(|r| r.1).map(|r| (r.2, r.0)).collect();
            prop_assert_eq!(inode_port(table.as_bytes()), expected);
        }
    }
}
