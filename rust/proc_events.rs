//! The kernel's process events (the netlink proc connector, `CN_IDX_PROC`), read as hints of
//! which processes to look at again: forks, execs, exits and comm changes. `/proc` stays the
//! source of truth; an event never says what a process is, only that it may have changed.
//!
//! Message layouts from Linux's `include/uapi/linux/cn_proc.h`, `include/uapi/linux/connector.h`
//! and `drivers/connector/cn_proc.c` (v6.18); the subscription handshake as `forkstat.c` does it.
//! Facts that matter here:
//! - the reply to `PROC_CN_MCAST_LISTEN` is an event with `what == PROC_EVENT_NONE` carrying an
//!   errno, broadcast to every listener, with our `ack + 1` (`cn_proc_ack`); since it goes through
//!   `send_msg` its `seq` and `cpu` are those of any event (older kernels echoed our seq and gave
//!   cpu -1); a subscriber outside the initial user or pid namespace gets no reply and no events
//!   at all (`cn_proc_mcast_ctl` returns early), hence the timeout;
//! - event sequence numbers count per CPU (`local_event.count`), and each event names its CPU, so
//!   a gap is looked for per CPU; a lost message is also reported by the socket as `ENOBUFS`;
//! - fork fires for threads too (`child_pid != child_tgid`), and exit for every thread
//!   (`process_pid != process_tgid`): only whole processes are kept.
//!
//! Everything here parses untrusted bytes (any process on the host may also send to the group):
//! no input panics, every offset is bounds-checked.

#[cfg(target_os = "linux")]
use std::time::Duration;

/// `NETLINK_CONNECTOR`, and the connector id of process events (`CN_IDX_PROC`, `CN_VAL_PROC`).
pub const NETLINK_CONNECTOR: i32 = 11;
pub const CN_IDX_PROC: u32 = 1;
pub const CN_VAL_PROC: u32 = 1;
/// `enum proc_cn_mcast_op`.
pub const PROC_CN_MCAST_LISTEN: u32 = 1;

const NLMSG_HDRLEN: usize = 16;
/// `struct cn_msg` without its payload: id (idx, val), seq, ack, len, flags.
const CN_MSG_LEN: usize = 20;
/// `struct proc_event` before the union: what, cpu, timestamp_ns.
const EVENT_HEAD: usize = 16;
const NLMSG_ERROR: u16 = 2;

const PROC_EVENT_NONE: u32 = 0;
const PROC_EVENT_FORK: u32 = 1;
const PROC_EVENT_EXEC: u32 = 2;
const PROC_EVENT_COMM: u32 = 0x200;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// What one event says about one process (threads already left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new process (`fork`: `child_pid == child_tgid`); its argv is still its parent's.
    Forked,
    /// The process runs another program.
    Exec,
    /// The process renamed itself (`prctl(PR_SET_NAME)`, as setproctitle does).
    Comm,
    /// The process (its thread group leader) exited.
    Exited,
}

/// One message of the process-event group, as far as a listener cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A change to the process `pid`; `seq` counts on `cpu`.
    Event {
        cpu: u32,
        seq: u32,
        pid: i32,
        change: Change,
    },
    /// The reply to a `PROC_CN_MCAST_LISTEN` (or `IGNORE`) whose `ack` was `ack - 1`: `err` is 0
    /// or an errno. Sequenced on `cpu` like an event.
    Ack {
        cpu: u32,
        seq: u32,
        ack: u32,
        err: u32,
    },
    /// A sequenced event of no interest (a thread's fork or exit, uid, gid, sid, ptrace,
    /// coredump changes): counted for gap detection only.
    Skipped { cpu: u32, seq: u32 },
}

/// A datagram that is not a well-formed process-event message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// A length field points outside the datagram or below its header.
    Truncated,
    /// A netlink error message (`NLMSG_ERROR`) with this errno.
    Netlink(i32),
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_ne_bytes(bytes))
}

fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    let bytes: [u8; 2] = data.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(u16::from_ne_bytes(bytes))
}

fn i32_at(data: &[u8], at: usize) -> Option<i32> {
    u32_at(data, at).map(|v| v as i32)
}

/// The messages of one datagram (netlink may pack several), appended to `out`. Messages of
/// another connector id are left out; a malformed one stops the parse with an error, keeping
/// what came before it.
pub fn parse_datagram(data: &[u8], out: &mut Vec<Message>) -> Result<(), ParseError> {
    let mut rest = data;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32_at(rest, 0).ok_or(ParseError::Truncated)? as usize;
        let kind = u16_at(rest, 4).ok_or(ParseError::Truncated)?;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(ParseError::Truncated);
        }
        let payload = rest.get(NLMSG_HDRLEN..len).ok_or(ParseError::Truncated)?;
        if kind == NLMSG_ERROR {
            let errno = i32_at(payload, 0).ok_or(ParseError::Truncated)?;
            return Err(ParseError::Netlink(errno.saturating_neg()));
        }
        if let Some(message) = parse_cn_msg(payload)? {
            out.push(message);
        }
        // Netlink messages are aligned to 4 bytes.
        let next = len.checked_add(3).map(|n| n & !3).unwrap_or(usize::MAX);
        rest = rest.get(next..).unwrap_or_default();
    }
    Ok(())
}

fn parse_cn_msg(payload: &[u8]) -> Result<Option<Message>, ParseError> {
    let field = |at| u32_at(payload, at).ok_or(ParseError::Truncated);
    let (idx, val, seq, ack) = (field(0)?, field(4)?, field(8)?, field(12)?);
    let len = usize::from(u16_at(payload, 16).ok_or(ParseError::Truncated)?);
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC) {
        return Ok(None);
    }
    let event = payload
        .get(CN_MSG_LEN..CN_MSG_LEN.saturating_add(len))
        .ok_or(ParseError::Truncated)?;
    let at = |offset| u32_at(event, offset).ok_or(ParseError::Truncated);
    let (what, cpu) = (at(0)?, at(4)?);
    let data = EVENT_HEAD;
    let pid_tgid = |first: usize| -> Result<(i32, i32), ParseError> {
        Ok((at(data + first)? as i32, at(data + first + 4)? as i32))
    };
    let process = |pid: i32, tgid: i32, change| {
        if pid == tgid && pid > 0 {
            Message::Event {
                cpu,
                seq,
                pid,
                change,
            }
        } else {
            Message::Skipped { cpu, seq }
        }
    };
    Ok(Some(match what {
        PROC_EVENT_NONE => Message::Ack {
            cpu,
            seq,
            ack,
            err: at(data)?,
        },
        PROC_EVENT_FORK => {
            // parent_pid, parent_tgid, child_pid, child_tgid
            let (pid, tgid) = pid_tgid(8)?;
            process(pid, tgid, Change::Forked)
        }
        PROC_EVENT_EXEC | PROC_EVENT_COMM | PROC_EVENT_EXIT => {
            let (pid, tgid) = pid_tgid(0)?;
            let change = match what {
                PROC_EVENT_EXEC => Change::Exec,
                PROC_EVENT_COMM => Change::Comm,
                _ => Change::Exited,
            };
            process(pid, tgid, change)
        }
        _ => Message::Skipped { cpu, seq },
    }))
}

/// The datagram that subscribes to (`PROC_CN_MCAST_LISTEN`) the process events, with `seq` and
/// `ack` chosen by the caller to recognise the reply.
pub fn listen_request(seq: u32, ack: u32) -> Vec<u8> {
    let op = PROC_CN_MCAST_LISTEN.to_ne_bytes();
    let total = NLMSG_HDRLEN + CN_MSG_LEN + op.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_ne_bytes());
    out.extend_from_slice(&3u16.to_ne_bytes()); // NLMSG_DONE: the connector's message type
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills in ours
    for word in [CN_IDX_PROC, CN_VAL_PROC, seq, ack] {
        out.extend_from_slice(&word.to_ne_bytes());
    }
    out.extend_from_slice(&(op.len() as u16).to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&op);
    out
}

/// Tells, per CPU, whether an event was lost between two that arrived. An event older than the
/// last one seen on its CPU (a late delivery) is no loss.
#[derive(Debug, Default)]
pub struct Sequences {
    next: Vec<Option<u32>>,
}

impl Sequences {
    /// Records `seq` on `cpu`; `false` when events before it on that CPU never arrived.
    pub fn record(&mut self, cpu: u32, seq: u32) -> bool {
        // A CPU number beyond any machine's is a forged message: not tracked, not trusted.
        let Ok(cpu) = usize::try_from(cpu) else {
            return true;
        };
        if cpu >= 65_536 {
            return true;
        }
        if self.next.len() <= cpu {
            self.next.resize(cpu + 1, None);
        }
        let Some(slot) = self.next.get_mut(cpu) else {
            return true;
        };
        let complete = match *slot {
            None => true,
            Some(expected) => {
                let ahead = seq.wrapping_sub(expected) as i32;
                if ahead < 0 {
                    return true;
                }
                ahead == 0
            }
        };
        *slot = Some(seq.wrapping_add(1));
        complete
    }

    /// Forgets every CPU's position (after a loss, the rescan restarts from what arrives next).
    pub fn reset(&mut self) {
        self.next.clear();
    }
}

/// What a batch of events asks the scanner to do.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Hints {
    /// Processes to look at again, in arrival order, each with what happened to it.
    pub changed: Vec<(i32, Change)>,
    /// Events were lost (`ENOBUFS`, a sequence gap, a malformed message): only a full listing
    /// of `/proc` can tell what happened.
    pub lost: bool,
}

impl Hints {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && !self.lost
    }

    pub fn clear(&mut self) {
        self.changed.clear();
        self.lost = false;
    }

    /// Adds the events of `messages`, checking their sequence.
    pub fn add(&mut self, messages: &[Message], sequences: &mut Sequences) {
        for message in messages {
            match *message {
                Message::Event {
                    cpu,
                    seq,
                    pid,
                    change,
                } => {
                    self.lost |= !sequences.record(cpu, seq);
                    self.changed.push((pid, change));
                }
                Message::Skipped { cpu, seq } | Message::Ack { cpu, seq, .. } => {
                    self.lost |= !sequences.record(cpu, seq);
                }
            }
        }
    }
}

/// Why the process events cannot be used (the caller then polls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// The socket or the subscription failed with this errno (`EPROTONOSUPPORT`: no connector in
    /// this network namespace; `EPERM`: no privilege).
    Errno(i32),
    /// No reply to the subscription within the timeout: outside the initial namespaces.
    NoAck,
    /// Not Linux.
    Unsupported,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Errno(errno) => {
                let err = std::io::Error::from_raw_os_error(*errno);
                write!(f, "process events: subscription failed: {err}")
            }
            Unavailable::NoAck => write!(
                f,
                "process events: no reply to the subscription (outside the initial namespaces?)"
            ),
            Unavailable::Unsupported => write!(f, "process events: not available on this system"),
        }
    }
}

#[cfg(target_os = "linux")]
pub use listener::Listener;

#[cfg(target_os = "linux")]
mod listener {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    /// How much the kernel may queue for us before dropping (and reporting `ENOBUFS`): bursts of
    /// forks (a build, a test suite) must not overflow between two reads.
    const RECEIVE_BUFFER: i32 = 8 << 20;

    /// A subscription to the process events.
    #[derive(Debug)]
    pub struct Listener {
        fd: OwnedFd,
        sequences: Sequences,
        buf: Vec<u8>,
        messages: Vec<Message>,
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }

    fn set_int(fd: i32, option: i32, value: i32) -> bool {
        // SAFETY: `value` lives across the call and its size is passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            ) == 0
        }
    }

    /// Waits until `fd` is readable or `timeout` passes; `false` on timeout.
    fn readable(fd: i32, timeout: Duration) -> bool {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        ready > 0
    }

    impl Listener {
        /// Subscribes and waits up to `ack_timeout` for the kernel's reply.
        pub fn subscribe(ack_timeout: Duration) -> Result<Self, Unavailable> {
            // SAFETY: plain socket(2); the fd is owned at once.
            let raw = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    NETLINK_CONNECTOR,
                )
            };
            if raw < 0 {
                return Err(Unavailable::Errno(errno()));
            }
            // SAFETY: `raw` is a fresh fd nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // Root may go past rmem_max; others get what the system allows.
            if !set_int(raw, libc::SO_RCVBUFFORCE, RECEIVE_BUFFER) {
                set_int(raw, libc::SO_RCVBUF, RECEIVE_BUFFER);
            }
            // SAFETY: zeroed sockaddr_nl is valid; family and groups set below.
            let mut address: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            address.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            address.nl_groups = CN_IDX_PROC;
            // SAFETY: `address` is a valid sockaddr_nl of the size passed.
            let bound = unsafe {
                libc::bind(
                    raw,
                    (&address as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if bound != 0 {
                return Err(Unavailable::Errno(errno()));
            }
            let mut listener = Listener {
                fd,
                sequences: Sequences::default(),
                buf: vec![0; 64 * 1024],
                messages: Vec::new(),
            };
            // Our reply is told from other listeners' by its ack (the kernel returns ack + 1).
            let ack = std::process::id().rotate_left(16) ^ 0x5eed;
            let request = listen_request(0, ack);
            // SAFETY: `request` is valid for its length.
            let sent = unsafe { libc::send(raw, request.as_ptr().cast(), request.len(), 0) };
            if sent < 0 {
                return Err(Unavailable::Errno(errno()));
            }
            listener.await_ack(ack.wrapping_add(1), ack_timeout)?;
            Ok(listener)
        }

        fn await_ack(&mut self, ack: u32, timeout: Duration) -> Result<(), Unavailable> {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || !readable(self.fd.as_raw_fd(), left) {
                    return Err(Unavailable::NoAck);
                }
                let mut messages = Vec::new();
                match self.receive() {
                    Ok(n) => {
                        let data = self.buf.get(..n).unwrap_or_default();
                        if let Err(ParseError::Netlink(errno)) = parse_datagram(data, &mut messages)
                        {
                            return Err(Unavailable::Errno(errno));
                        }
                    }
                    Err(libc::ENOBUFS | libc::EAGAIN | libc::EINTR) => continue,
                    Err(errno) => return Err(Unavailable::Errno(errno)),
                }
                // Events may come before our reply (another listener is subscribed): their
                // positions are the starting point.
                for message in messages {
                    let (Message::Event { cpu, seq, .. }
                    | Message::Skipped { cpu, seq }
                    | Message::Ack { cpu, seq, .. }) = message;
                    self.sequences.record(cpu, seq);
                    if let Message::Ack { ack: a, err, .. } = message {
                        if a == ack {
                            return match err {
                                0 => Ok(()),
                                err => Err(Unavailable::Errno(err as i32)),
                            };
                        }
                    }
                }
            }
        }

        /// One datagram into `buf` without blocking: its length, or an errno.
        fn receive(&mut self) -> Result<usize, i32> {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            usize::try_from(n).map_err(|_| errno())
        }

        /// Waits up to `timeout` for events, then adds every one queued to `hints`. A lost
        /// event (`ENOBUFS`, a gap, a malformed message) sets `hints.lost`. `Err` is an errno
        /// that ends the subscription (the caller goes back to polling).
        pub fn read(&mut self, timeout: Duration, hints: &mut Hints) -> Result<(), i32> {
            if !readable(self.fd.as_raw_fd(), timeout) {
                return Ok(());
            }
            loop {
                match self.receive() {
                    Ok(n) => {
                        self.messages.clear();
                        let data = self.buf.get(..n).unwrap_or_default();
                        let parsed = parse_datagram(data, &mut self.messages);
                        hints.add(&self.messages, &mut self.sequences);
                        hints.lost |= parsed.is_err();
                    }
                    Err(libc::EAGAIN | libc::EINTR) => return Ok(()),
                    Err(libc::ENOBUFS) => hints.lost = true,
                    Err(errno) => return Err(errno),
                }
                if hints.lost {
                    self.sequences.reset();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
