//! A node's bounds on what one client can make it hold: a client that pipelines and never
//! reads its replies, a subscriber that stops reading, and the open files that
//! `--max-connections` needs. Each holds the node's memory within its bound, ends the
//! client after `--max-output-stall`, and leaves other clients served.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{FirnProcess, metrics_sum, wait_until};

fn rss_mib(node: &FirnProcess) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id())).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib / 1024.0
}

fn counter(node: &FirnProcess, line_start: &str) -> f64 {
    metrics_sum(&node.http_addr, line_start)
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A client that reads each reply before it sends the next command.
struct Probe(BufReader<TcpStream>);

impl Probe {
    fn connect(node: &FirnProcess) -> Probe {
        let s = TcpStream::connect(node.resp_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Probe(BufReader::new(s))
    }

    /// The reply's first line, and a bulk string's bytes.
    fn call(&mut self, args: &[&[u8]]) -> (String, Vec<u8>) {
        self.0.get_mut().write_all(&command(args)).unwrap();
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let mut body = Vec::new();
        if let Some(n) = line
            .strip_prefix('$')
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            body.resize(n + 2, 0);
            self.0.read_exact(&mut body).unwrap();
            body.truncate(n);
        }
        (line.trim_end().to_string(), body)
    }
}

/// Sends `request` `times` times on a connection of its own from a thread, never reading;
/// the thread ends once a write fails: the node closed the connection.
fn never_reading(
    node: &FirnProcess,
    request: Vec<u8>,
    times: usize,
) -> std::thread::JoinHandle<()> {
    let mut s = TcpStream::connect(node.resp_addr()).unwrap();
    std::thread::spawn(move || {
        let batch = request.repeat(1_000);
        for _ in 0..times / 1_000 {
            if s.write_all(&batch).is_err() {
                return;
            }
        }
        // All sent and still open: wait (reading nothing) until the node closes it.
        while s.write_all(b"PING\r\n").is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// Another client's GET and SET, each answered within `within`, while `busy` lasts.
fn probe_while(node: &FirnProcess, within: Duration, mut busy: impl FnMut() -> bool) -> usize {
    let mut probe = Probe::connect(node);
    let mut calls = 0;
    while busy() {
        let started = Instant::now();
        assert_eq!(probe.call(&[b"SET", b"probe", b"x"]).0, "+OK");
        assert_eq!(probe.call(&[b"GET", b"probe"]).1, b"x");
        assert!(
            started.elapsed() < within,
            "a probe took {:?}",
            started.elapsed()
        );
        calls += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    calls
}

/// 100,000 pipelined GETs of a 1 MiB value whose replies are never read: the node reads
/// few values at a time for such a client, stops reading its requests while 64 KiB of
/// replies wait (it once held and encoded a whole input buffer's worth, hundreds of MiB),
/// and closes it after `--max-output-stall`.
#[test]
fn a_client_that_never_reads_its_replies_is_disconnected_and_the_node_stays_small() {
    let data = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(data.path(), &["--in-memory", "--max-output-stall", "2s"]);
    let value = vec![b'v'; 1 << 20];
    let mut probe = Probe::connect(&node);
    assert_eq!(probe.call(&[b"SET", b"big", &value]).0, "+OK");
    let before_mib = rss_mib(&node);

    let reader = never_reading(&node, command(&[b"GET", b"big"]), 100_000);
    let mut peak_mib = before_mib;
    let probes = probe_while(&node, Duration::from_secs(2), || {
        peak_mib = peak_mib.max(rss_mib(&node));
        !reader.is_finished()
    });
    reader.join().unwrap();
    assert!(probes > 0);
    assert_eq!(
        counter(
            &node,
            "firn_resp_clients_closed_total{reason=\"output_stalled\"}"
        ),
        1.0
    );
    assert!(
        peak_mib - before_mib < 96.0,
        "the node grew from {before_mib:.0} MiB to {peak_mib:.0} MiB for one client"
    );
    assert_eq!(probe.call(&[b"GET", b"big"]).1.len(), value.len());
}

/// A subscriber that stops reading while 256 KiB messages are published: its queue holds at
/// most 8 MiB of them (the rest are dropped, and counted), and it is disconnected after
/// `--max-output-stall`. 1,024 queued messages of this size once held 256 MiB.
#[test]
fn a_subscriber_that_stops_reading_loses_messages_past_its_queue_and_is_disconnected() {
    let data = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(data.path(), &["--in-memory", "--max-output-stall", "2s"]);
    let mut subscriber = Probe::connect(&node);
    subscriber
        .0
        .get_mut()
        .write_all(&command(&[b"SUBSCRIBE", b"news"]))
        .unwrap();
    let mut confirmed = String::new();
    for _ in 0..6 {
        subscriber.0.read_line(&mut confirmed).unwrap();
    }
    assert!(confirmed.contains("subscribe"), "{confirmed}");
    let before_mib = rss_mib(&node);

    let message = vec![b'm'; 256 << 10];
    let mut publisher = Probe::connect(&node);
    let mut peak_mib = before_mib;
    for _ in 0..1_500 {
        let (line, _) = publisher.call(&[b"PUBLISH", b"news", &message]);
        assert!(line == ":1" || line == ":0", "{line}");
        peak_mib = peak_mib.max(rss_mib(&node));
    }
    assert!(counter(&node, "firn_pubsub_messages_dropped_total") > 0.0);
    assert!(
        peak_mib - before_mib < 96.0,
        "the node grew from {before_mib:.0} MiB to {peak_mib:.0} MiB for one subscriber"
    );
    let closed = wait_until(Duration::from_secs(30), || {
        counter(
            &node,
            "firn_resp_clients_closed_total{reason=\"output_stalled\"}",
        ) == 1.0
    });
    assert!(closed, "the subscriber was not disconnected");
    assert_eq!(publisher.call(&[b"PUBLISH", b"news", b"after"]).0, ":0");
}

/// A node started with a soft open-file limit of 1,024 raises it to hold
/// `--max-connections` (the hard limit allowing), and takes more connections than 1,024.
#[test]
fn the_open_file_limit_is_raised_to_hold_max_connections() {
    let mut own = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `own` is a valid rlimit to fill, then to read.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut own) }, 0);
    const CONNECTIONS: u64 = 3_000;
    if own.rlim_max < CONNECTIONS + 1_024 + 64 {
        eprintln!("skipped: the hard open-file limit is {}", own.rlim_max);
        return;
    }
    let low = libc::rlimit {
        rlim_cur: 1_024,
        rlim_max: own.rlim_max,
    };
    let data = tempfile::tempdir().unwrap();
    // The node inherits the lowered limit; this process gets its own back at once.
    // SAFETY: valid rlimits; setrlimit only reads them.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let max = CONNECTIONS.to_string();
    let node = FirnProcess::start(data.path(), &["--in-memory", "--max-connections", &max]);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &own) }, 0);

    let limits = std::fs::read_to_string(format!("/proc/{}/limits", node.child.id())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .expect("Max open files in /proc/PID/limits");
    assert!(
        soft >= CONNECTIONS + 1_024,
        "the node's soft limit is {soft}"
    );
    let mut held: Vec<Probe> = (0..1_500).map(|_| Probe::connect(&node)).collect();
    for probe in held.iter_mut().step_by(100) {
        assert_eq!(probe.call(&[b"PING"]).0, "+PONG");
    }
    assert_eq!(held.last_mut().unwrap().call(&[b"PING"]).0, "+PONG");
}

#[test]
fn an_idle_connection_gives_its_buffers_back() {
    const CONNECTIONS: usize = 2_000;
    let mut own = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `own` is a valid rlimit to fill, then to read.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut own) }, 0);
    if own.rlim_max < CONNECTIONS as u64 + 256 {
        eprintln!("skipped: the hard open-file limit is {}", own.rlim_max);
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: own.rlim_cur.max(CONNECTIONS as u64 + 256),
        rlim_max: own.rlim_max,
    };
    // SAFETY: a valid rlimit; setrlimit only reads it.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) }, 0);
    let data = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(data.path(), &["--in-memory"]);
    Probe::connect(&node).call(&[b"PING"]);
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_mib(&node);
    // Each connection has read a command and written its reply: it held both buffers.
    let mut held: Vec<Probe> = (0..CONNECTIONS).map(|_| Probe::connect(&node)).collect();
    for probe in &mut held {
        assert_eq!(probe.call(&[b"PING"]).0, "+PONG");
    }
    // Idle past a second, each gives them back: what stays is the connection's state.
    std::thread::sleep(Duration::from_secs(3));
    let per_connection_kib = (rss_mib(&node) - before) * 1024.0 / CONNECTIONS as f64;
    assert!(
        per_connection_kib < 20.0,
        "{per_connection_kib:.1} KiB per idle connection (16 KiB buffers each way would be 32 more)"
    );
    // And each still works.
    for probe in held.iter_mut().step_by(97) {
        assert_eq!(probe.call(&[b"SET", b"k", b"v"]).0, "+OK");
        assert_eq!(probe.call(&[b"GET", b"k"]).1, b"v");
    }
}

/// A peer frame: an App request (postcard: `Envelope { id, body: PeerRequest::App(bytes),
/// wall_us }`) whose payload the node cannot decode, so it answers each with an error.
fn peer_frame(id: u64) -> Vec<u8> {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { b } else { b | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    let mut body = Vec::new();
    varint(id, &mut body);
    varint(4, &mut body); // PeerRequest::App
    varint(2, &mut body);
    body.extend_from_slice(b"\xff\xff");
    varint(1_700_000_000_000_000, &mut body);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

#[test]
fn a_peer_that_reads_none_of_its_answers_is_disconnected() {
    let data = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(data.path(), &["--in-memory"]);
    let mut peer = TcpStream::connect(&node.peer_addr).unwrap();
    peer.set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // Requests, never reading an answer: the answers fill the socket, then the node's
    // queue, then the node stops reading; 30 s after its last answer went out it closes.
    let started = Instant::now();
    let mut id = 0u64;
    let closed = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the connection is still open after {:?}",
            started.elapsed()
        );
        let batch: Vec<u8> = (0..1_000)
            .flat_map(|_| {
                id += 1;
                peer_frame(id)
            })
            .collect();
        match peer.write_all(&batch) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break started.elapsed(),
        }
    };
    assert!(closed >= Duration::from_secs(25), "closed after {closed:?}");
    assert_eq!(
        counter(
            &node,
            "firn_peer_connections_closed_total{reason=\"output_stalled\"}"
        ),
        1.0
    );
    // Other clients were served all along.
    assert_eq!(Probe::connect(&node).call(&[b"PING"]).0, "+PONG");
}
