use super::*;

/// The recorded datagrams (see `recorded.txt`): (label, bytes).
fn recorded() -> Vec<(&'static str, Vec<u8>)> {
    include_str!("recorded.txt")
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (label, hex) = line.split_once(' ').expect("label and bytes");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (label, bytes)
        })
        .collect()
}

fn parse_all() -> Vec<Message> {
    let mut out = Vec::new();
    for (_, bytes) in recorded() {
        parse_datagram(&bytes, &mut out).expect("a recorded datagram parses");
    }
    out
}

const CHILD: i32 = 0x2aa0;
const GRANDCHILD: i32 = 0x2aa4;
const THREAD: i32 = 0x2aa2;

#[test]
fn recorded_messages_give_the_process_changes_and_leave_threads_out() {
    let changes: Vec<(i32, Change)> = parse_all()
        .into_iter()
        .filter_map(|m| match m {
            Message::Event { pid, change, .. } => Some((pid, change)),
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            (CHILD, Change::Forked),
            (CHILD, Change::Exec),
            (CHILD, Change::Comm),
            (GRANDCHILD, Change::Forked),
            (GRANDCHILD, Change::Exec),
            (GRANDCHILD, Change::Exited),
            (CHILD, Change::Exited),
        ]
    );
    assert!(!changes.iter().any(|(pid, _)| *pid == THREAD));
}

#[test]
fn the_thread_events_are_sequenced_but_skipped() {
    let skipped: Vec<Message> = parse_all()
        .into_iter()
        .filter(|m| matches!(m, Message::Skipped { .. }))
        .collect();
    // the thread's fork (on CPU 1) and its exit (on CPU 0)
    assert_eq!(
        skipped,
        vec![
            Message::Skipped {
                cpu: 1,
                seq: 0x195d
            },
            Message::Skipped {
                cpu: 0,
                seq: 0x1e9e
            },
        ]
    );
}

#[test]
fn the_ack_carries_our_ack_plus_one_and_no_error() {
    let messages = parse_all();
    assert_eq!(
        messages.first(),
        Some(&Message::Ack {
            cpu: 1,
            seq: 0x1958,
            ack: 42,
            err: 0
        })
    );
}

#[test]
fn the_listen_request_has_the_layout_the_kernel_reads() {
    let request = listen_request(7, 41);
    assert_eq!(request.len(), 40);
    assert_eq!(u32_at(&request, 0), Some(40)); // nlmsg_len
    assert_eq!(u16_at(&request, 4), Some(3)); // NLMSG_DONE
    assert_eq!(u32_at(&request, 16), Some(CN_IDX_PROC));
    assert_eq!(u32_at(&request, 20), Some(CN_VAL_PROC));
    assert_eq!(u32_at(&request, 24), Some(7));
    assert_eq!(u32_at(&request, 28), Some(41));
    assert_eq!(u16_at(&request, 32), Some(4)); // payload length
    assert_eq!(u32_at(&request, 36), Some(PROC_CN_MCAST_LISTEN));
}

#[test]
fn several_messages_in_one_datagram_are_all_read() {
    let records = recorded();
    let mut packed = Vec::new();
    for (_, bytes) in &records[1..4] {
        packed.extend_from_slice(bytes);
    }
    let mut out = Vec::new();
    parse_datagram(&packed, &mut out).unwrap();
    assert_eq!(out.len(), 3);
}

#[test]
fn consecutive_messages_are_no_loss_and_the_filtered_recording_is() {
    let messages = parse_all();
    // the ack, the child's fork and exec: 0x1958..=0x195a on CPU 1
    let mut hints = Hints::default();
    hints.add(&messages[..3], &mut Sequences::default());
    assert!(!hints.lost);
    assert_eq!(hints.changed.len(), 2);
    // the recording left out other processes' events (0x195b, 0x195c, ...): gaps
    let mut hints = Hints::default();
    hints.add(&messages, &mut Sequences::default());
    assert!(hints.lost);
    assert_eq!(hints.changed.len(), 7);
}

#[test]
fn a_missing_message_is_a_loss() {
    let mut messages = parse_all();
    // the grandchild's exec (CPU 1) never arrived
    messages.retain(|m| {
        !matches!(
            m,
            Message::Event {
                pid: GRANDCHILD,
                change: Change::Exec,
                ..
            }
        )
    });
    let mut hints = Hints::default();
    hints.add(&messages, &mut Sequences::default());
    assert!(hints.lost);
}

#[test]
fn a_late_message_is_no_loss_and_cpus_are_apart() {
    let mut sequences = Sequences::default();
    assert!(sequences.record(0, 10));
    assert!(sequences.record(1, 500));
    assert!(sequences.record(0, 11));
    assert!(sequences.record(0, 9), "late, not lost");
    assert!(sequences.record(0, 12));
    assert!(!sequences.record(1, 502), "501 was lost");
    // the counter wraps around
    assert!(sequences.record(2, u32::MAX));
    assert!(sequences.record(2, 0));
    // a forged CPU number is not tracked
    assert!(sequences.record(u32::MAX, 3));
    assert!(sequences.record(u32::MAX, 99));
}

#[test]
fn truncated_and_forged_datagrams_are_errors_not_panics() {
    let (_, fork) = recorded().swap_remove(1);
    for cut in 0..fork.len() {
        let mut out = Vec::new();
        let result = parse_datagram(&fork[..cut], &mut out);
        // a header of less than 16 bytes is ignored; anything cut inside the message is an error
        if cut >= NLMSG_HDRLEN {
            assert_eq!(result, Err(ParseError::Truncated), "cut at {cut}");
        }
        assert!(out.is_empty());
    }
    let mut long = fork.clone();
    long[0..4].copy_from_slice(&1000u32.to_ne_bytes());
    assert_eq!(
        parse_datagram(&long, &mut Vec::new()),
        Err(ParseError::Truncated)
    );
    // the cn_msg claims more payload than there is
    let mut claims = fork.clone();
    claims[32..34].copy_from_slice(&200u16.to_ne_bytes());
    assert_eq!(
        parse_datagram(&claims, &mut Vec::new()),
        Err(ParseError::Truncated)
    );
}

#[test]
fn another_connector_id_is_ignored_and_a_netlink_error_reported() {
    let (_, mut fork) = recorded().swap_remove(1);
    fork[16..20].copy_from_slice(&9u32.to_ne_bytes());
    let mut out = Vec::new();
    parse_datagram(&fork, &mut out).unwrap();
    assert!(out.is_empty());
    let mut error = vec![0u8; 36];
    error[0..4].copy_from_slice(&36u32.to_ne_bytes());
    error[4..6].copy_from_slice(&2u16.to_ne_bytes());
    error[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
    assert_eq!(
        parse_datagram(&error, &mut out),
        Err(ParseError::Netlink(libc::EPERM))
    );
}

#[test]
fn negative_or_zero_pids_are_not_processes() {
    let (_, mut exec) = recorded().swap_remove(2);
    exec[52..56].copy_from_slice(&0i32.to_ne_bytes());
    exec[56..60].copy_from_slice(&0i32.to_ne_bytes());
    let mut out = Vec::new();
    parse_datagram(&exec, &mut out).unwrap();
    assert!(matches!(out[..], [Message::Skipped { .. }]));
}

#[cfg(target_os = "linux")]
#[test]
fn a_live_subscription_is_acked_or_refused_with_a_reason() {
    // Root in the initial namespaces gets events; elsewhere the reason must be one of those the
    // caller falls back on.
    match Listener::subscribe(Duration::from_secs(1)) {
        Ok(mut listener) => {
            let child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id() as i32;
            let mut child = child;
            child.wait().unwrap();
            let mut hints = Hints::default();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !hints.changed.contains(&(pid, Change::Exited))
                && std::time::Instant::now() < deadline
            {
                listener
                    .read(Duration::from_millis(100), &mut hints)
                    .unwrap();
            }
            assert!(hints.changed.contains(&(pid, Change::Forked)), "{hints:?}");
            assert!(hints.changed.contains(&(pid, Change::Exec)), "{hints:?}");
            assert!(hints.changed.contains(&(pid, Change::Exited)), "{hints:?}");
        }
        Err(Unavailable::NoAck) => {}
        Err(Unavailable::Errno(errno)) => assert!(
            [libc::EPERM, libc::EPROTONOSUPPORT, libc::EACCES].contains(&errno),
            "{errno}"
        ),
        Err(Unavailable::Unsupported) => panic!("Linux has the connector"),
    }
}
