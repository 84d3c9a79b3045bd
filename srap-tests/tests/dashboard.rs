//! `srap status` in a real terminal against the real lab: tmux (a private
//! server, `tmux -L` with this PID) runs the dashboard at 80×24 and at
//! 160×45 while both agents steer a 16-flow iperf3 workload across the
//! lab's emulated 32-queue NIC. Read back with `capture-pane`, each screen
//! must give every active data flow's whole source address by scrolling
//! (Home, then PgDn), show no cut number (every cell of a flow row and
//! every meter label parses whole, and queues and planned CPUs equal what
//! the agent's JSON says), say the same flow count in its top line and its
//! flows title, and mark no collision (SRAP puts the flows on distinct
//! queues). Then the receiver agent is killed: the top line of both screens
//! says STALE within one refresh, and recovers by itself when the agent is
//! started again. `q` ends the dashboard with the terminal restored (no
//! alternate screen, cursor shown, canonical mode and echo back).
//!
//! `SRAP_DASHBOARD_CAPTURE=DIR` keeps the screens read (docs/status.md
//! shows them). The ground truth is the receiver agent's own JSON snapshot for the
//! flows' addresses and queues (its observer's observation, not the
//! dashboard's), and the terminal's own state for the restore.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    ops::ControlFlow,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use srap_harness::{
    programs::{ChildGuard, iperf3_server},
    srap_exec,
};
use srap_lab::{
    agents::LabAgents,
    topology::{LabNet, Watch},
};
use srap_status::{FlowRow, Status, control::request_status};
use srap_tests::{built_binary, harness::poll_until, require_privileged, unique_name};

const PORT: u16 = 5321;
const FLOWS: usize = 16;
/// The dashboard's refresh, and so the promise for a dead agent.
const REFRESH: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(20);

/// A tmux server of our own (`-L NAME`), killed on drop with every session.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Self {
        Self {
            socket: unique_name("tmux"),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux (`cargo xtask setup` installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A detached session `name` of `width`×`height` running `command`.
    fn session(&self, name: &str, (width, height): (u16, u16), command: &str) {
        let (w, h) = (width.to_string(), height.to_string());
        self.run(&["new-session", "-d", "-s", name, "-x", &w, "-y", &h, command]);
    }

    fn screen(&self, name: &str) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-t", name])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn keys(&self, name: &str, keys: &str) {
        self.run(&["send-keys", "-t", name, keys]);
    }

    /// The screen once `ready` holds (bounded).
    fn wait_screen(
        &self,
        name: &str,
        what: &str,
        ready: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        poll_until(WAIT, Duration::from_millis(100), || {
            let screen = self.screen(name);
            if ready(&screen) {
                ControlFlow::Break(screen)
            } else {
                ControlFlow::Continue(screen)
            }
        })
        .unwrap_or_else(|screen| {
            panic!(
                "{name}: {what} not seen within {WAIT:?}:\n{}",
                screen.join("\n")
            )
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// True when tmux is installed; its absence fails the test (it was asked
/// to run: see `srap_tests::privilege`).
fn require_tmux() {
    srap_tests::privilege::require_program("tmux", &[], "`cargo xtask setup` installs it");
}

/// The flows title's `a–b of n`.
fn flows_range(screen: &[String]) -> Option<(usize, usize, usize)> {
    let title = screen.iter().find(|l| l.starts_with("flows "))?;
    let range = title.strip_prefix("flows ")?.split(" · ").next()?;
    let (shown, total) = range.split_once(" of ")?;
    let (a, b) = shown.split_once('–')?;
    Some((a.parse().ok()?, b.parse().ok()?, total.parse().ok()?))
}

/// The flows' header (column titles) and rows on a screen.
fn flow_table(screen: &[String]) -> (Vec<String>, Vec<String>) {
    let title = screen
        .iter()
        .position(|l| l.starts_with("flows "))
        .expect("a flows title");
    let header = screen[title + 1]
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let rows = screen[title + 2..]
        .iter()
        .take_while(|l| l.starts_with("10.199."))
        .cloned()
        .collect();
    (header, rows)
}

fn whole_int(cell: &str) -> bool {
    cell == "-" || (!cell.is_empty() && cell.bytes().all(|b| b.is_ascii_digit()))
}

/// `12.95`: digits, a point, two digits (the dashboard's only format).
fn whole_rate(cell: &str) -> bool {
    cell == "-"
        || cell.split_once('.').is_some_and(|(i, f)| {
            !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) && f.len() == 2 && whole_int(f)
        })
}

/// Checks one flow row cell by cell against its column and the agent's
/// JSON; returns its source.
fn check_row(header: &[String], row: &str, truth: &BTreeMap<SocketAddr, FlowRow>) -> SocketAddr {
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells.len() >= header.len(), "a cell is missing: {row}");
    let source: SocketAddr = cells[0]
        .parse()
        .unwrap_or_else(|_| panic!("cut address: {row}"));
    let flow = truth
        .get(&source)
        .unwrap_or_else(|| panic!("{source} is not an active flow of the agent: {row}"));
    for (title, cell) in header.iter().zip(&cells) {
        let ok = match title.as_str() {
            "source" | "destination" => cell.parse::<SocketAddr>().is_ok(),
            "Gbit/s" | "CoV" => whole_rate(cell),
            "queue" => *cell == flow.queue.map_or("-".into(), |q| q.to_string()),
            "planned" => *cell == flow.planned_cpu.map_or("-".into(), |q| q.to_string()),
            _ => whole_int(cell),
        };
        assert!(
            ok,
            "column {title}: `{cell}` is cut or wrong: {row} (agent: {flow:?})"
        );
    }
    assert_eq!(
        row.ends_with("agent link"),
        flow.agent_link,
        "a sender agent's own connection is marked as such, and only it: {row}"
    );
    source
}

/// Every meter label (`12[|||  1 0.93]`) is whole; returns the meters' ids.
fn check_meters(screen: &[String]) -> BTreeSet<u32> {
    let mut ids = BTreeSet::new();
    for line in screen.iter().filter(|l| l.contains('[') && l.contains(']')) {
        for cell in line.split(']').filter(|c| c.contains('[')) {
            let (id, inside) = cell.rsplit_once('[').expect("a meter");
            let id = id.trim_start_matches('!').trim();
            let label: Vec<&str> = inside.trim_start_matches(['|', ' ']).split(' ').collect();
            assert!(
                whole_int(id) && label.len() == 2 && whole_int(label[0]) && whole_rate(label[1]),
                "a cut meter `{cell}]` in: {line}"
            );
            ids.insert(id.parse().expect("an id"));
        }
    }
    ids
}

/// Scrolls `name` from Home to the end, checking every screen; returns the
/// sources seen.
fn scroll_through(tmux: &Tmux, name: &str, control: &Path) -> BTreeSet<SocketAddr> {
    // Every flow the agent reported active while the screens were read (the
    // agents' own connection comes and goes with its keepalives).
    let mut flows: BTreeMap<SocketAddr, FlowRow> = BTreeMap::new();
    let learn = |flows: &mut BTreeMap<SocketAddr, FlowRow>| {
        let (status, _) = request_status(control).expect("the receiver agent's status");
        for flow in status.flows {
            flows.entry(flow.src).or_insert(flow);
        }
    };
    learn(&mut flows);
    tmux.keys(name, "Home");
    let mut screen = tmux.wait_screen(name, "the first flows", |s| {
        flows_range(s).is_some_and(|(a, _, _)| a == 1)
    });
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        let (_, end, total) = flows_range(&screen).expect("a flows range");
        let top = &screen[0];
        assert!(
            top.contains(&format!(" {total} flows")),
            "the top line and the flows title disagree:\n{}",
            screen.join("\n")
        );
        let (header, rows) = flow_table(&screen);
        learn(&mut flows);
        assert_eq!(
            rows.len(),
            end + 1 - flows_range(&screen).expect("range").0,
            "{}",
            screen.join("\n")
        );
        for row in &rows {
            seen.insert(check_row(&header, row, &flows));
        }
        assert!(
            !screen.join("\n").contains("COLLISION"),
            "SRAP's flows collide?\n{}",
            screen.join("\n")
        );
        assert_eq!(
            check_meters(&screen),
            (0..32).collect(),
            "{}",
            screen.join("\n")
        );
        if end == total {
            return seen;
        }
        tmux.keys(name, "PageDown");
        screen = tmux.wait_screen(name, "the next page", |s| {
            flows_range(s).is_some_and(|(_, e, _)| e > end)
        });
    }
    panic!("{name}: the end of the flows was not reached");
}

/// With `SRAP_DASHBOARD_CAPTURE=DIR`, writes `screen` to
/// `DIR/NAME-WHAT.txt`: the documentation's screenshots come from here.
fn keep(what: &str, name: &str, screen: &[String]) {
    if let Some(dir) = std::env::var_os("SRAP_DASHBOARD_CAPTURE") {
        let path = Path::new(&dir).join(format!("{name}-{what}.txt"));
        std::fs::write(&path, screen.join("\n") + "\n").expect("write the capture");
    }
}

/// The steered workload's data flows as the agent sees them.
fn data_flows(control: &Path) -> Status {
    poll_until(WAIT, Duration::from_millis(200), || {
        let (status, _) = request_status(control).expect("the receiver agent's status");
        let data = status
            .flows
            .iter()
            .filter(|f| f.dst.port() == PORT && f.bytes > 1 << 20 && f.gbps > 0.0)
            .count();
        if data == FLOWS {
            ControlFlow::Break(status)
        } else {
            ControlFlow::Continue((data, status))
        }
    })
    .unwrap_or_else(|(data, status)| panic!("{data} of {FLOWS} data flows active: {status:#?}"))
}

#[test]
#[ignore = "kernel: needs root, netns, bpffs and tmux; run as root by `cargo xtask test`"]
fn the_dashboard_in_a_real_terminal_at_80x24_and_160x45() {
    require_privileged("the_dashboard_in_a_real_terminal_at_80x24_and_160x45");
    require_tmux();
    let net = LabNet::new(32, Watch::Agent).expect("lab network");
    let mut agents =
        LabAgents::start(&net, &built_binary("srap-agent"), PORT).expect("both agents");
    let _server = iperf3_server(&net.hosts.receiver, PORT).expect("iperf3 server");
    let mut client = srap_exec(
        &net.hosts.sender,
        &built_binary("srap"),
        Some(agents.sender.cgroup()),
        "iperf3",
    );
    client
        .args([
            "-c",
            &net.receiver_ip().to_string(),
            "-p",
            &PORT.to_string(),
        ])
        // `-t 0`: the flows run until the test drops the workload (killed
        // by PID), however long reading the screens takes on a busy host;
        // every view of them is read while they run.
        .args(["-P", &FLOWS.to_string(), "-t", "0"]);
    let _workload = ChildGuard::spawn(client.stdout(Stdio::null())).expect("the workload");
    let truth = data_flows(&agents.receiver.control());

    let tmux = Tmux::new();
    let srap = built_binary("srap");
    let command = format!(
        "{} status --control {} --interval {}; echo srap exited $?; stty -a; sleep 600",
        srap.display(),
        agents.receiver.control().display(),
        REFRESH.as_millis()
    );
    let sizes = [("small", (80, 24)), ("large", (160, 45))];
    for (name, size) in sizes {
        tmux.session(name, size, &command);
    }
    for (name, _) in sizes {
        tmux.wait_screen(name, "the dashboard", |s| flows_range(s).is_some());
        let seen = scroll_through(&tmux, name, &agents.receiver.control());
        tmux.keys(name, "Home");
        keep(
            "first",
            name,
            &tmux.wait_screen(name, "the top", |s| {
                flows_range(s).is_some_and(|(a, _, _)| a == 1)
            }),
        );
        let data: BTreeSet<SocketAddr> = truth
            .flows
            .iter()
            .filter(|f| f.dst.port() == PORT && f.bytes > 1 << 20)
            .map(|f| f.src)
            .collect();
        assert!(
            data.is_subset(&seen),
            "{name}: flows never shown: {:?}",
            data.difference(&seen)
        );
        // The sender agent's own connection is listed too, as such.
    }

    // The receiver agent dies: both screens say so at the top within one
    // refresh (plus the quarter second the dashboard waits for keys).
    agents.receiver.kill();
    let killed = Instant::now();
    for (name, _) in sizes {
        let screen = tmux.wait_screen(name, "STALE at the top", |s| s[0].starts_with("STALE"));
        assert!(
            killed.elapsed() <= REFRESH + Duration::from_millis(900),
            "{name}: STALE after {:?}",
            killed.elapsed()
        );
        let banner = screen.join(" ");
        assert!(banner.contains("Why: nothing answers on"), "{banner}");
        keep("stale", name, &screen);
    }
    // … and recover by themselves when it is back.
    agents.receiver.restart().expect("the receiver agent again");
    for (name, _) in sizes {
        tmux.wait_screen(name, "the dashboard back", |s| {
            s[0].starts_with("srap status")
        });
    }

    // q: the dashboard ends and the terminal is as it was.
    for (name, _) in sizes {
        tmux.keys(name, "q");
        let screen = tmux.wait_screen(name, "the shell after q", |s| {
            s.iter().any(|l| l.contains("srap exited 0")) && s.iter().any(|l| l.contains("icanon"))
        });
        let state = tmux.run(&[
            "display",
            "-p",
            "-t",
            name,
            "#{alternate_on} #{cursor_flag}",
        ]);
        assert_eq!(
            state.trim(),
            "0 1",
            "{name}: alternate screen off, cursor on"
        );
        let stty: BTreeSet<&str> = screen.iter().flat_map(|l| l.split_whitespace()).collect();
        assert!(
            stty.contains("icanon") && stty.contains("echo") && !stty.contains("-icanon"),
            "{name}: the terminal is left raw: {}",
            screen.join("\n")
        );
    }
}
