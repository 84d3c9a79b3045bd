//! The test workload: the helper binary `srap-test-workload IP:PORT`
//! ([`serve`], `src/bin/srap-test-workload.rs`), run (under `srap exec` or
//! not) inside the sender's namespace, that opens and closes connections on
//! command so a test sees exactly the source ports a real application got.
//!
//! A binary of its own, not a re-run of the test binary: a `#[test]` that
//! only served when re-run would report `ok` in every normal run. Cargo
//! builds it beside the tests (`cargo test -p srap-tests`, `cargo build
//! --bins`); [`Workload::spawn`] finds it with [`built_binary`]. The
//! packages ship only `srap` and `srap-agent`, never this.

use std::{
    io::Write as _,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream},
    path::Path,
    process::{ChildStdin, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use socket2::{Domain, Protocol, Socket, Type};
use srap_harness::{srap_exec, srap_exec_with};

use crate::{NetNs, built_binary, cgroup::ChildGuard, flows::line_channel, socket_patterns};

/// The helper binary's name (`target/<profile>/srap-test-workload`).
pub const WORKLOAD_BINARY: &str = "srap-test-workload";
/// Prefix of the workload's answers (the test harness prints too).
const ANSWER: &str = "SRAPWL ports ";
/// Upper bound on every connect and every wait for an answer.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Sent on every new connection, so the receiver sees data packets too.
const GREETING: &[u8] = b"srap test workload";

/// The workload's side. Commands on stdin: `open N`, `burst N` (N threads
/// connecting at once), `close N` (the oldest N), `bind PORT` (connect from
/// a port it binds itself, as an application may), `openat IP N` (N to
/// another receiver address, same port), `ownaddr IP N` (N bound to source
/// address IP first, port 0, `IP_BIND_ADDRESS_NO_PORT`), `retry N` (N that
/// each connect again after a refused connect on the same socket),
/// `forkhold SECONDS` (every open connection handed to a forked child that
/// holds it that long; the workload's own copies closed), `churn RATE SECONDS` (a
/// connection per object: connect, send, close, RATE a second), `hot N` (N
/// of those back to back), `pin CPU` (the connects after it run on that
/// CPU; answered with no port), `udp N` (N UDP sockets `connect()`ed to
/// `dst`, closed at once: the ports the kernel gave them), `peers` (for
/// each open connection, 1 when `getpeername()` returns `dst`, else 0),
/// `bulk N KIB` (N
/// kept connections that each send KIB KiB after the greeting), `mptcp N` (N
/// MPTCP connections, kept: their first subflows' ports); each is answered with one `SRAPWL ports P,P,…`
/// line (0: a connect that failed); EOF ends it. Connects to `dst`.
pub fn serve(dst: SocketAddr) {
    let mut open: Vec<TcpStream> = Vec::new();
    for line in std::io::stdin().lines() {
        let line = line.expect("stdin");
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        let number = |i: usize| -> u32 {
            args.get(i)
                .and_then(|a| a.parse().ok())
                .expect("numeric argument")
        };
        let ports: Vec<u16> = match cmd {
            "churn" => churn(dst, number(0), Duration::from_secs(number(1).into())),
            "hot" => (0..number(0)).map(|_| object(dst)).collect(),
            "bulk" => (0..number(0))
                .map(|_| {
                    let stream = TcpStream::connect_timeout(&dst, TIMEOUT).expect("connect");
                    let port = greet(stream, &mut open);
                    let kib = vec![0x5a; 1024];
                    let last = open.last_mut().expect("just opened");
                    for _ in 0..number(1) {
                        last.write_all(&kib).expect("send");
                    }
                    port
                })
                .collect(),
            "udp" => (0..number(0)).map(|_| udp_connect(dst)).collect(),
            "lingering" => (0..number(0)).map(|_| object_to_time_wait(dst)).collect(),
            "openat" => {
                let ip: IpAddr = args
                    .first()
                    .and_then(|a| a.parse().ok())
                    .expect("an address");
                let to = SocketAddr::new(ip, dst.port());
                (0..number(1))
                    .map(|_| {
                        let stream = TcpStream::connect_timeout(&to, TIMEOUT).expect("connect");
                        greet(stream, &mut open)
                    })
                    .collect()
            }
            "ownaddr" => {
                let ip: IpAddr = args
                    .first()
                    .and_then(|a| a.parse().ok())
                    .expect("an address");
                (0..number(1))
                    .map(|_| {
                        greet(
                            socket_patterns::from_own_address(dst, ip, TIMEOUT),
                            &mut open,
                        )
                    })
                    .collect()
            }
            "mptcp" => (0..number(0))
                .map(|_| greet(socket_patterns::mptcp(dst, TIMEOUT), &mut open))
                .collect(),
            "retry" => (0..number(0))
                .map(|_| {
                    greet(
                        socket_patterns::after_a_refused_connect(dst, TIMEOUT),
                        &mut open,
                    )
                })
                .collect(),
            "pin" => {
                pin_to(number(0));
                Vec::new()
            }
            "peers" => open
                .iter()
                .map(|s| u16::from(s.peer_addr().is_ok_and(|p| p == dst)))
                .collect(),
            "forkhold" => {
                let ports = open
                    .iter()
                    .map(|s| s.local_addr().map_or(0, |a| a.port()))
                    .collect();
                socket_patterns::share_with_a_child(
                    &mut open,
                    Duration::from_secs(number(0).into()),
                );
                ports
            }
            _ => legacy(cmd, number(0), dst, &mut open),
        };
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        println!("{ANSWER}{}", list.join(","));
        std::io::stdout().flush().expect("stdout");
    }
}

/// Pins the workload's command thread (every later connect but a burst's)
/// to `cpu`: a reader thread pinned before it connects.
fn pin_to(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // for cpu below CPU_SETSIZE (checked), and sched_setaffinity(0) changes
    // only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert!((cpu as usize) < libc::CPU_SETSIZE as usize, "CPU {cpu}");
        libc::CPU_SET(cpu as usize, &mut set);
        let done = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            done,
            0,
            "pinning to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Connect timeout of a connection-per-object: a connect that takes longer
/// is counted as failed.
const OBJECT_CONNECT: Duration = Duration::from_secs(3);

/// One object's connection: connect, send, close first (the client's side
/// of the tuple then waits in TIME_WAIT). Its port, or 0 if it failed.
fn object(dst: SocketAddr) -> u16 {
    let Ok(mut stream) = TcpStream::connect_timeout(&dst, OBJECT_CONNECT) else {
        return 0;
    };
    let port = stream.local_addr().map_or(0, |a| a.port());
    if stream.write_all(GREETING).is_err() {
        return 0;
    }
    port
}

/// [`object`], then waits (at most [`OBJECT_CONNECT`]) for the server to
/// close too before the next: the client closed first, so its side of the
/// tuple is in TIME_WAIT, not still in FIN_WAIT2 behind a slow server, when
/// a later connect comes round to it. Its port, or 0 if it failed.
fn object_to_time_wait(dst: SocketAddr) -> u16 {
    let Ok(mut stream) = TcpStream::connect_timeout(&dst, OBJECT_CONNECT) else {
        return 0;
    };
    let port = stream.local_addr().map_or(0, |a| a.port());
    let sent = stream.write_all(GREETING).is_ok()
        && stream.shutdown(std::net::Shutdown::Write).is_ok()
        && stream.set_read_timeout(Some(OBJECT_CONNECT)).is_ok();
    let mut rest = [0u8; 64];
    // The server sends nothing: a read of 0 bytes is its close.
    if !sent || !matches!(std::io::Read::read(&mut stream, &mut rest), Ok(0)) {
        return 0;
    }
    port
}

/// `rate` objects a second for `length`, each on its own connection.
fn churn(dst: SocketAddr, rate: u32, length: Duration) -> Vec<u16> {
    let start = Instant::now();
    let total = (u64::from(rate) * length.as_secs()) as u32;
    (0..total)
        .map(|i| {
            let due = start + Duration::from_secs_f64(f64::from(i) / f64::from(rate.max(1)));
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            object(dst)
        })
        .collect()
}

/// A UDP socket `connect()`ed to `dst` (no packet sent; the connect gives
/// it its port): that port. The binder steers TCP only and leaves it alone.
fn udp_connect(dst: SocketAddr) -> u16 {
    let socket = Socket::new(Domain::for_address(dst), Type::DGRAM, Some(Protocol::UDP))
        .expect("udp socket");
    socket.connect(&dst.into()).expect("udp connect");
    socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or(0, |a| a.port())
}

/// The commands with one numeric argument that keep their connections.
fn legacy(cmd: &str, n: u32, dst: SocketAddr, open: &mut Vec<TcpStream>) -> Vec<u16> {
    let n = u16::try_from(n).expect("a port-sized argument");
    match cmd {
        "open" => (0..n)
            .map(|_| {
                let stream = TcpStream::connect_timeout(&dst, TIMEOUT).expect("connect");
                greet(stream, open)
            })
            .collect(),
        "close" => open
            .drain(..usize::from(n).min(open.len()))
            .map(|s| s.local_addr().expect("local addr").port())
            .collect(),
        "bind" => vec![greet(connect_from_port(dst, n), open)],
        "burst" => burst(dst, usize::from(n))
            .into_iter()
            .map(|stream| greet(stream, open))
            .collect(),
        other => panic!("unknown workload command {other}"),
    }
}

/// `n` threads that each connect at the same moment (after a barrier).
fn burst(dst: SocketAddr, n: usize) -> Vec<TcpStream> {
    let start = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let start = std::sync::Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                TcpStream::connect_timeout(&dst, TIMEOUT).expect("connect")
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("connecting thread"))
        .collect()
}

fn greet(mut stream: TcpStream, open: &mut Vec<TcpStream>) -> u16 {
    stream.write_all(GREETING).expect("send");
    let port = stream.local_addr().expect("local addr").port();
    open.push(stream);
    port
}

/// The test's side: a running workload process and its command channel.
pub struct Workload {
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    child: ChildGuard,
}

impl Workload {
    /// Runs `srap-test-workload dst` in `ns`; under `srap exec --cgroup`
    /// when `cgroup` is given.
    pub fn spawn(ns: &NetNs, cgroup: Option<&Path>, dst: SocketAddr) -> Self {
        let exe = built_binary(WORKLOAD_BINARY);
        Self::spawn_command(srap_exec(ns, &built_binary("srap"), cgroup, exe), dst)
    }

    /// The workload under `srap exec FLAGS…` into `cgroup` (its stderr, what
    /// `srap exec` says, is the test's).
    pub fn spawn_exec_with(ns: &NetNs, cgroup: &Path, flags: &[&str], dst: SocketAddr) -> Self {
        let exe = built_binary(WORKLOAD_BINARY);
        let srap = built_binary("srap");
        Self::spawn_command(srap_exec_with(ns, &srap, cgroup, flags, exe), dst)
    }

    /// The workload as `cmd` runs it (a command ending in the workload's
    /// path: `srap exec … -- srap-test-workload` inside a booted machine,
    /// say), told to connect to `dst`.
    pub fn spawn_command(mut cmd: std::process::Command, dst: SocketAddr) -> Self {
        let mut child = cmd
            .arg(dst.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn workload");
        Self {
            stdin: child.stdin.take(),
            lines: line_channel(child.stdout.take().expect("stdout")),
            child: ChildGuard::new(child),
        }
    }

    /// Sends one command and returns the ports of its answer.
    pub fn ask(&mut self, command: &str) -> Vec<u16> {
        self.send(command);
        self.answer(TIMEOUT)
    }

    /// Sends one command without waiting: [`Workload::answer`] collects
    /// its answer (long commands, while the test does something else).
    pub fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{command}").expect("write to workload");
        stdin.flush().expect("flush to workload");
    }

    /// The ports of the next answer, waiting up to `within`.
    pub fn answer(&mut self, within: Duration) -> Vec<u16> {
        let command = "the last command";
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer from the workload to `{command}`"));
            // Only answer lines count (a panic's message is not one).
            if let Some((_, list)) = line.split_once(ANSWER) {
                return list
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| p.parse().expect("port"))
                    .collect();
            }
        }
    }

    pub fn open(&mut self, n: usize) -> Vec<u16> {
        self.ask(&format!("open {n}"))
    }

    /// `n` kept connections that each send `kib` KiB (`bulk N KIB`).
    pub fn bulk(&mut self, n: usize, kib: u32) -> Vec<u16> {
        self.ask(&format!("bulk {n} {kib}"))
    }

    /// For each open connection, whether `getpeername()` returns the
    /// address and port it connected to.
    pub fn peers_as_asked(&mut self) -> Vec<bool> {
        self.ask("peers").into_iter().map(|v| v == 1).collect()
    }

    /// `n` kept connections bound to `ip` first (`ownaddr IP N`).
    pub fn own_address(&mut self, ip: IpAddr, n: usize) -> Vec<u16> {
        self.ask(&format!("ownaddr {ip} {n}"))
    }

    /// Pins the workload's connecting thread to `cpu` (`pin CPU`): the
    /// connects after it run there.
    pub fn pin(&mut self, cpu: u32) {
        self.ask(&format!("pin {cpu}"));
    }

    pub fn close(&mut self, n: usize) -> Vec<u16> {
        self.ask(&format!("close {n}"))
    }

    /// SIGKILL: the process dies with its connections open, and the kernel
    /// closes them.
    pub fn kill(mut self) {
        self.child.kill();
    }

    /// Closes stdin and waits for a clean exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait(TIMEOUT).expect("workload exits");
        assert!(status.success(), "workload failed: {status}");
    }
}

/// An application that binds its own source port before connecting.
fn connect_from_port(dst: SocketAddr, port: u16) -> TcpStream {
    let any: IpAddr = if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let socket =
        Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP)).expect("socket");
    socket
        .bind(&SocketAddr::new(any, port).into())
        .expect("bind");
    socket.connect(&dst.into()).expect("connect");
    socket.into()
}
