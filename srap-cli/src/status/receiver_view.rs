//! The receiver's live page: a top line, the verdicts, htop-like meters per
//! receive CPU and per queue, the flows (focused, scrollable, sortable,
//! filterable) and the senders — laid out for the terminal's size from
//! 80×24 up. One meaning per column: a flow's `cpu` is its receive CPU
//! (the observed one, or on a device without RSS the description's
//! emulated one, titled `emu.cpu`), compared with the CPU its sender
//! planned; COLLISION marks flows that share a receive CPU or queue.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::Path,
    time::{Duration, SystemTime},
};

use ratatui::{
    Frame,
    crossterm::event::KeyCode,
    layout::Rect,
    style::{Color, Style},
    text::{Line, Span},
    widgets::Paragraph,
};
use srap_common::wire::LandingVerdict;
use srap_status::{ControlError, FlowRow, ReceiveCpu, Status, request_status};

use super::{
    columns::{Align, Column, cut, render},
    format::{
        access, ago, bold, cov, cpu_title, gbps, granted, green, header, landings, nic_hash,
        observer, opt, ratio, red,
    },
    list::{Scroll, range_text},
    live::{Page, pack},
    meters::{Grid, Meter, grid},
};

/// How the flows are ordered (`s` cycles, `r` reverses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sort {
    /// By queue, as the agent sends them.
    #[default]
    Queue,
    Cpu,
    /// Busiest first.
    Rate,
    Source,
}

impl Sort {
    fn next(self) -> Self {
        match self {
            Self::Queue => Self::Cpu,
            Self::Cpu => Self::Rate,
            Self::Rate => Self::Source,
            Self::Source => Self::Queue,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Cpu => "cpu",
            Self::Rate => "Gbit/s",
            Self::Source => "source",
        }
    }
}

/// Which meters show (`m` cycles).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Meters {
    /// Receive CPUs, and queues too when there is room.
    #[default]
    Auto,
    Cpus,
    Queues,
}

/// The receiver page's state between frames.
#[derive(Debug, Default)]
pub struct ReceiverPage {
    scroll: Scroll,
    sort: Sort,
    reverse: bool,
    collisions_only: bool,
    meters: Meters,
}

/// One flow as the page shows it.
struct FlowLine<'a> {
    flow: &'a FlowRow,
    cpu: Option<u32>,
    collision: bool,
    note: String,
}

/// What a receive CPU is on this receiver, in a few words.
fn cpu_kind(status: &Status) -> &'static str {
    match status.receive_cpu {
        ReceiveCpu::Observed => "receive CPUs",
        ReceiveCpu::Emulated => "emulated receive CPUs (one per queue)",
    }
}

impl ReceiverPage {
    /// The flows in view order, with what each is marked with.
    fn flow_lines<'a>(&self, status: &'a Status) -> Vec<FlowLine<'a>> {
        let colliding_queues: BTreeSet<u32> = status
            .queues
            .iter()
            .filter(|q| q.collision)
            .map(|q| q.queue)
            .collect();
        let colliding_cpus: BTreeSet<u32> = status
            .receive_cpus()
            .iter()
            .filter(|c| c.collision)
            .map(|c| c.cpu)
            .collect();
        let mut lines: Vec<FlowLine<'a>> = status
            .flows
            .iter()
            .map(|flow| {
                let cpu = flow.receive_cpu(status.receive_cpu);
                // An agent link is not counted in loads, so never collides.
                let collision = !flow.agent_link
                    && (flow.queue.is_some_and(|q| colliding_queues.contains(&q))
                        || cpu.is_some_and(|c| colliding_cpus.contains(&c)));
                FlowLine {
                    flow,
                    cpu,
                    collision,
                    note: note(flow, cpu, collision),
                }
            })
            .filter(|line| !self.collisions_only || line.collision)
            .collect();
        self.order(&mut lines);
        lines
    }

    fn order(&self, lines: &mut [FlowLine<'_>]) {
        let key = |l: &FlowLine<'_>| (l.flow.src, l.flow.dst);
        match self.sort {
            Sort::Queue => lines.sort_by_key(|l| (l.flow.queue, key(l))),
            Sort::Cpu => lines.sort_by_key(|l| (l.cpu, key(l))),
            Sort::Rate => lines.sort_by(|a, b| {
                b.flow
                    .gbps
                    .total_cmp(&a.flow.gbps)
                    .then(key(a).cmp(&key(b)))
            }),
            Sort::Source => lines.sort_by_key(key),
        }
        if self.reverse {
            lines.reverse();
        }
    }
}

/// COLLISION, MISPREDICTED (not on the model's queue), OFF PLAN (not on
/// the sender's planned CPU); `agent link` for a sender agent's own
/// connection.
fn note(flow: &FlowRow, cpu: Option<u32>, collision: bool) -> String {
    if flow.agent_link {
        return "agent link".into();
    }
    let mispredicted = flow.queue.is_some()
        && flow.predicted_queue.is_some()
        && flow.queue != flow.predicted_queue;
    let off_plan = flow.planned_cpu.is_some() && cpu != flow.planned_cpu;
    [
        (collision, "COLLISION"),
        (mispredicted, "MISPREDICTED"),
        (off_plan, "OFF PLAN"),
    ]
    .into_iter()
    .filter_map(|(on, text)| on.then_some(text))
    .collect::<Vec<_>>()
    .join(",")
}

fn flow_id(flow: &FlowRow) -> String {
    format!("{}>{}", flow.src, flow.dst)
}

/// The flows' columns, most important first in priority.
fn flow_columns(status: &Status, lines: &[FlowLine<'_>]) -> Vec<Column> {
    let cells = |f: &dyn Fn(&FlowLine<'_>) -> String| lines.iter().map(f).collect::<Vec<_>>();
    let addr = |a: SocketAddr| a.to_string();
    vec![
        Column::new("source", Align::Left, 0, cells(&|l| addr(l.flow.src))),
        Column::new("destination", Align::Left, 8, cells(&|l| addr(l.flow.dst))),
        Column::new("queue", Align::Right, 1, cells(&|l| opt(l.flow.queue))),
        Column::new(cpu_title(status), Align::Right, 3, cells(&|l| opt(l.cpu))),
        Column::new("Gbit/s", Align::Right, 4, cells(&|l| gbps(l.flow.gbps))),
        Column::new(
            "planned",
            Align::Right,
            5,
            cells(&|l| opt(l.flow.planned_cpu)),
        ),
        Column::new(
            "pred.q",
            Align::Right,
            6,
            cells(&|l| opt(l.flow.predicted_queue)),
        ),
        Column::new(
            "pred.cpu",
            Align::Right,
            11,
            cells(&|l| opt(l.flow.predicted_cpu)),
        ),
        Column::new("CoV", Align::Right, 9, cells(&|l| cov(l.flow.rate_cov))),
        Column::new(
            "moves",
            Align::Right,
            10,
            cells(&|l| l.flow.moves.to_string()),
        ),
        Column::new(
            "packets",
            Align::Right,
            12,
            cells(&|l| l.flow.packets.to_string()),
        ),
        Column::new("", Align::Left, 2, cells(&|l| l.note.clone())),
    ]
}

/// The senders' columns.
fn sender_columns(status: &Status) -> Vec<Column> {
    let peers = &status.peers;
    let cells =
        |f: &dyn Fn(&srap_status::PeerRow) -> String| peers.iter().map(f).collect::<Vec<_>>();
    vec![
        Column::new("sender", Align::Left, 0, cells(&|p| p.addr.clone())),
        Column::new("flows", Align::Right, 1, cells(&|p| p.flows.to_string())),
        Column::new("plan v", Align::Right, 2, cells(&|p| opt(p.plan_version))),
        Column::new(
            "last plan",
            Align::Right,
            3,
            cells(&|p| ago(status.unix_ms, p.last_plan_unix_ms)),
        ),
        Column::new("granted CPUs", Align::Left, 4, cells(&granted)),
        Column::new(
            "connected",
            Align::Right,
            6,
            cells(&|p| ago(status.unix_ms, Some(p.connected_unix_ms))),
        ),
        Column::new("agent", Align::Left, 5, cells(&|p| p.agent.clone())).name(),
    ]
}

/// The top line: what this is and the headline figures, as many as fit.
fn title_line(status: &Status, width: usize) -> Line<'static> {
    let pieces = vec![
        vec![Span::styled("srap status", bold())],
        vec![Span::raw(format!("receiver {}", cut(&status.iface, 20)))],
        vec![Span::raw(format!("{} flows", status.active_flows))],
        vec![Span::raw(format!("{} Gbit/s", gbps(status.gbps)))],
        vec![Span::raw(match status.peers.len() {
            1 => "1 sender".to_owned(),
            n => format!("{n} senders"),
        })],
        vec![Span::raw(format!("RSS v{}", status.rss_version))],
        vec![Span::raw(format!(
            "observer {}",
            cut(&observer(status), 40)
        ))],
    ];
    pack(pieces, width, 1)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// The verdicts: collisions, prediction, plan, the closed loop.
fn verdict_lines(status: &Status, width: usize) -> Vec<Line<'static>> {
    let queues = status.collisions.queues;
    let cpus = status.cpu_collisions();
    let kind = match status.receive_cpu {
        ReceiveCpu::Observed => "CPUs",
        ReceiveCpu::Emulated => "emulated CPUs",
    };
    let collisions = if queues + cpus == 0 {
        Span::styled("no collisions", green())
    } else {
        Span::styled(format!("COLLISIONS: {queues} queues, {cpus} {kind}"), red())
    };
    let verdict_style = match status.landings.verdict {
        LandingVerdict::Agreed => green(),
        LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => red(),
        LandingVerdict::Unknown => Style::new(),
    };
    // Serving anyone without a key (`--open`) is said first, where it
    // always fits; a receiver with a key or an allow-list is the normal
    // case, said by `--once` and `--json`.
    let open = status
        .access
        .open
        .then(|| Span::styled(access(status), red()));
    let mut pieces = vec![
        open.into_iter().chain([collisions]).collect(),
        vec![Span::raw(format!(
            "on the model's queue {}",
            ratio(status.accuracy.queue)
        ))],
        vec![Span::raw(format!(
            "on the planned CPU {}",
            ratio(status.accuracy.plan)
        ))],
        vec![Span::styled(landings(status), verdict_style)],
        vec![Span::styled(
            nic_hash(status),
            if status.nic_hash.differ > 0 {
                red()
            } else {
                Style::new()
            },
        )],
    ];
    pieces.extend(nic_pieces(status));
    pack(pieces, width, 2)
}

/// With several NICs served, each one's flows, rate and receive CPUs (a
/// NIC whose link is down in red); the rest of the page is the first's.
fn nic_pieces(status: &Status) -> Vec<Vec<Span<'static>>> {
    if status.nics.len() < 2 {
        return Vec::new();
    }
    status
        .nics
        .iter()
        .map(|nic| {
            let cpus = match nic.cpus.as_slice() {
                [] => "-".to_owned(),
                some => srap_host::cpulist::format(some.iter().copied()),
            };
            let text = format!(
                "{}: {} flows {} Gbit/s, CPUs {cpus}",
                nic.name,
                nic.active_flows,
                gbps(nic.gbps)
            );
            let style = match nic.link {
                srap_common::wire::NicLink::Down => red(),
                _ => Style::new(),
            };
            vec![Span::styled(text, style)]
        })
        .collect()
}

/// Meters of the receive CPUs and of the queues.
fn cpu_meters(status: &Status) -> Vec<Meter> {
    status
        .receive_cpus()
        .iter()
        .map(|c| Meter {
            id: c.cpu,
            flows: c.flows,
            gbps: c.gbps,
            collision: c.collision,
        })
        .collect()
}

fn queue_meters(status: &Status) -> Vec<Meter> {
    status
        .queues
        .iter()
        .map(|q| Meter {
            id: q.queue,
            flows: q.flows,
            gbps: q.gbps,
            collision: q.collision,
        })
        .collect()
}

/// A meter panel: its title line, then its grid.
fn panel(
    title: &str,
    meters: &[Meter],
    width: usize,
    rows: usize,
    hint: &str,
) -> Vec<Line<'static>> {
    let Grid { lines, hidden } = grid(meters, width, rows);
    let collisions = meters.iter().filter(|m| m.collision).count();
    let mut text = format!(
        "{title} · {} with flows",
        meters.iter().filter(|m| m.flows > 0).count()
    );
    if collisions > 0 {
        text += &format!(" · {collisions} COLLISION");
    }
    if hidden > 0 {
        text += &format!(" · {hidden} idle not shown");
    }
    text += hint;
    let style = if collisions > 0 { red() } else { bold() };
    let mut out = vec![Line::from(Span::styled(cut(&text, width), style))];
    out.extend(lines);
    out
}

/// Rows a meter grid takes for `meters` at `width` (all of them shown).
fn grid_rows(meters: &[Meter], width: usize) -> usize {
    grid(meters, width, usize::MAX / 2).lines.len()
}

impl ReceiverPage {
    /// The meter panels that fit `room` lines, leaving the flows theirs.
    fn meter_lines(&self, status: &Status, width: usize, room: usize) -> Vec<Line<'static>> {
        let cpus = cpu_meters(status);
        let queues = queue_meters(status);
        let cpu_title = cpu_kind(status);
        let (cpu_rows, queue_rows) = (grid_rows(&cpus, width), grid_rows(&queues, width));
        let both = 2 + cpu_rows + queue_rows;
        match self.meters {
            Meters::Auto if both <= room && !queues.is_empty() => {
                let mut lines = panel(cpu_title, &cpus, width, cpu_rows, "");
                lines.extend(panel("receive queues", &queues, width, queue_rows, ""));
                lines
            }
            Meters::Auto | Meters::Cpus => panel(
                cpu_title,
                &cpus,
                width,
                room.saturating_sub(1).max(1),
                " · m: queues",
            ),
            Meters::Queues => panel(
                "receive queues",
                &queues,
                width,
                room.saturating_sub(1).max(1),
                " · m: CPUs",
            ),
        }
    }

    /// The flows' title, header and rows in view (`rows` of them).
    fn flow_section(&mut self, status: &Status, width: usize, rows: usize) -> Vec<Line<'static>> {
        let lines = self.flow_lines(status);
        let ids: Vec<String> = lines.iter().map(|l| flow_id(l.flow)).collect();
        let range = self.scroll.place(&ids, rows);
        let mut title = format!(
            "flows {} · by {}{}",
            range_text(&range, lines.len()),
            self.sort.name(),
            if self.reverse { " (reversed)" } else { "" }
        );
        if self.collisions_only {
            title += &format!(" · collisions only, of {}", status.flows.len());
        }
        if lines.is_empty() {
            title += if self.collisions_only {
                " · none collide"
            } else {
                " · no active flows"
            };
        }
        let columns = flow_columns(status, &lines);
        let styled = range.clone().map(|i| {
            let line = &lines[i];
            let style = if line.collision {
                red()
            } else if !line.note.is_empty() {
                Style::new().fg(Color::Yellow)
            } else {
                Style::new()
            };
            (i, self.scroll.style(i, style))
        });
        let mut out = vec![Line::from(Span::styled(cut(&title, width), bold()))];
        out.extend(render(&columns, width, header(), styled));
        out
    }

    fn sender_section(status: &Status, width: usize, rows: usize) -> Vec<Line<'static>> {
        if status.peers.is_empty() {
            return vec![Line::from("senders: none connected")];
        }
        let columns = sender_columns(status);
        let shown = status.peers.len().min(rows);
        let mut lines = render(
            &columns,
            width,
            header(),
            (0..shown).map(|i| (i, Style::new())),
        );
        if shown < status.peers.len() {
            lines.push(Line::from(format!(
                "… {} more senders (a taller terminal shows them)",
                status.peers.len() - shown
            )));
        }
        lines
    }
}

impl Page for ReceiverPage {
    type Snapshot = Status;
    const AGENT: &'static str = "receiver agent";

    fn fetch_line(path: &Path) -> Result<(Status, String), ControlError> {
        request_status(path)
    }

    fn sampled(status: &Status) -> Option<(SystemTime, Duration)> {
        Some((
            SystemTime::UNIX_EPOCH + Duration::from_millis(status.unix_ms),
            Duration::from_millis(status.interval_ms.max(100)),
        ))
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, status: &Status) {
        let width = usize::from(area.width);
        let height = usize::from(area.height);
        let mut lines = vec![title_line(status, width)];
        lines.extend(verdict_lines(status, width));
        // Senders: a few rows on a small screen, more on a tall one.
        let sender_rows = if height >= 36 { 6 } else { 2 };
        let senders = Self::sender_section(status, width, sender_rows);
        // The flows keep at least a title, a header and a few rows.
        let flows_min = 2 + status.flows.len().clamp(1, 5);
        let meter_room = height.saturating_sub(lines.len() + senders.len() + flows_min);
        lines.extend(self.meter_lines(status, width, meter_room));
        let flow_rows = height.saturating_sub(lines.len() + senders.len() + 2);
        lines.extend(self.flow_section(status, width, flow_rows));
        // The senders at the bottom.
        let gap = height.saturating_sub(lines.len() + senders.len());
        lines.extend(std::iter::repeat_n(Line::raw(""), gap));
        lines.extend(senders);
        frame.render_widget(Paragraph::new(lines), area);
    }

    fn key(&mut self, code: KeyCode, status: &Status) {
        let len = self.flow_lines(status).len();
        if self.scroll.key(code, len) {
            return;
        }
        match code {
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                self.reverse = false;
            }
            KeyCode::Char('r') => self.reverse = !self.reverse,
            KeyCode::Char('c') => self.collisions_only = !self.collisions_only,
            KeyCode::Char('m') => {
                self.meters = match self.meters {
                    Meters::Auto => Meters::Cpus,
                    Meters::Cpus => Meters::Queues,
                    Meters::Queues => Meters::Auto,
                }
            }
            _ => {}
        }
    }

    fn keys(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("↑↓", "scroll"),
            ("s", "sort"),
            ("c", "collisions only"),
            ("m", "meters"),
            ("PgUp PgDn", "page up, down"),
            ("Home End", "first, last flow"),
            ("r", "reverse the order"),
        ]
    }

    fn legend(&self) -> Vec<String> {
        vec![
            "Meters: one per receive CPU (and per queue): the bar is its Gbit/s against the busiest, the label its active flows and Gbit/s; red with ! where two or more flows share it (a COLLISION).".into(),
            "Flows: queue and cpu are where the observer saw the flow land (emu.cpu: the description's emulated CPU of that queue, on a device without RSS such as the lab's veth); planned is the CPU its sender planned, pred.q the queue the RSS model computes. COLLISION: shares its receive CPU or queue; MISPREDICTED: not on the model's queue; OFF PLAN: not on the planned CPU; agent link: a sender agent's own connection to this agent, listed but not counted on the meters or in collisions.".into(),
            "Sorting: s cycles queue, cpu, Gbit/s (busiest first), source; r reverses. c shows only colliding flows.".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use ratatui::{Terminal, backend::TestBackend, style::Modifier};
    use srap_status::{Accuracy, Collisions, CpuRow, Landings, PeerRow, QueueRow, Ratio};

    use super::*;
    use crate::status::live::{Chrome, Feed, draw};

    /// With several NICs each one's flows, rate and CPUs are a piece of the
    /// verdict lines; with one, nothing is added.
    #[test]
    fn several_nics_each_show_their_flows_rate_and_cpus() {
        use srap_status::NicRow;
        let nic = |name: &str, flows: usize, cpus: Vec<u32>| NicRow {
            name: name.into(),
            active_flows: flows,
            gbps: 2.0,
            cpus,
            ..NicRow::default()
        };
        let mut status = Status {
            nics: vec![nic("eth0", 4, vec![0, 1, 2, 3])],
            ..Status::default()
        };
        assert!(nic_pieces(&status).is_empty());
        status.nics.push(nic("eth1", 0, Vec::new()));
        let text: Vec<String> = nic_pieces(&status)
            .iter()
            .map(|spans| spans.iter().map(|s| s.content.to_string()).collect())
            .collect();
        assert_eq!(
            text,
            [
                "eth0: 4 flows 2.00 Gbit/s, CPUs 0-3",
                "eth1: 0 flows 2.00 Gbit/s, CPUs -"
            ]
        );
    }

    /// The lab's picture: 32 queues, each its own emulated CPU, 16 flows
    /// on queues 1..=16, plus `extra` flows on queue 5 (collisions).
    fn lab(extra: u16) -> Status {
        let flow = |port: u16, queue: u32| FlowRow {
            src: format!("10.199.250.1:{port}").parse().expect("addr"),
            dst: "10.199.250.2:5202".parse().expect("addr"),
            queue: Some(queue),
            cpu: port.into(),
            rss_cpu: Some(queue),
            predicted_queue: Some(queue),
            predicted_cpu: Some(queue),
            planned_cpu: Some(queue),
            gbps: 0.93,
            rate_cov: Some(0.14),
            packets: 268_512,
            bytes: 1 << 30,
            moves: 182,
            agent_link: false,
            nic_hash: None,
            nic_hash_agrees: None,
        };
        let mut flows: Vec<FlowRow> = (1..=16).map(|q| flow(10_000 + q as u16, q)).collect();
        flows.extend((0..extra).map(|i| flow(20_000 + i, 5)));
        let per_queue = |q: u32| flows.iter().filter(|f| f.queue == Some(q)).count();
        let queues: Vec<QueueRow> = (0..32)
            .map(|q| QueueRow {
                queue: q,
                cpu: Some(q),
                flows: per_queue(q),
                gbps: 0.93 * per_queue(q) as f64,
                packets: 268_512,
                bytes: 0,
                collision: per_queue(q) > 1,
            })
            .collect();
        let rss_cpus = queues
            .iter()
            .map(|q| CpuRow {
                cpu: q.queue,
                flows: q.flows,
                gbps: q.gbps,
                packets: q.packets,
                bytes: 0,
                collision: q.collision,
            })
            .collect();
        let colliding = usize::from(extra > 0);
        Status {
            iface: "s2977x3r".into(),
            observer: srap_status::ObserverState {
                hook: Some("tc ingress (tcx)".into()),
                error: None,
                limits: Vec::new(),
            },
            rss_version: 1,
            // Sampled now: an old sample would be stale.
            unix_ms: u64::try_from(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .expect("after 1970")
                    .as_millis(),
            )
            .expect("ms fit"),
            interval_ms: 1000,
            active_flows: flows.len(),
            gbps: 0.93 * flows.len() as f64,
            queues,
            // The machine's two real CPUs ran everything: not a collision
            // anyone planned against.
            cpus: vec![CpuRow {
                cpu: 1,
                flows: flows.len(),
                gbps: 15.0,
                collision: true,
                ..CpuRow::default()
            }],
            rss_cpus,
            accuracy: Accuracy {
                queue: Ratio {
                    matched: flows.len(),
                    total: flows.len(),
                },
                plan: Ratio {
                    matched: flows.len(),
                    total: flows.len(),
                },
            },
            flows,
            collisions: Collisions {
                queues: colliding,
                cpus: 1,
                rss_cpus: colliding,
            },
            landings: Landings {
                verdict: LandingVerdict::Agreed,
                matched: 16,
                judged: 16,
            },
            peers: vec![PeerRow {
                addr: "10.199.250.1:58832".into(),
                agent: "srap-agent 0.1.0".into(),
                connected_unix_ms: 0,
                last_plan_unix_ms: None,
                plan_version: Some(1),
                granted: "0-31".into(),
                flows: 16,
                grant_epoch: 1,
                grant_applied: true,
                granted_nics: Vec::new(),
                key: Some("4998e76a915e5ab5".into()),
            }],
            receive_cpu: ReceiveCpu::Emulated,
            access: srap_status::Access {
                keys: vec!["4998e76a915e5ab5".into()],
                ..Default::default()
            },
            ..Status::default()
        }
    }

    /// The screen as text, one string per row.
    fn screen(page: &mut ReceiverPage, feed: &Feed<Status>, size: (u16, u16)) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(size.0, size.1)).expect("terminal");
        let chrome = Chrome {
            control: Path::new("/tmp/srap-lab-s2977x4/receiver.sock"),
            interval: Duration::from_secs(1),
            help: false,
        };
        terminal
            .draw(|frame| draw(frame, page, feed, &chrome))
            .expect("draw");
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect()
    }

    fn flow_rows(text: &[String]) -> Vec<&String> {
        text.iter()
            .filter(|l| l.starts_with("10.199.250.1:1") || l.starts_with("10.199.250.1:2"))
            .collect()
    }

    #[test]
    fn an_open_receiver_is_said_first_and_a_guarded_one_changes_nothing() {
        let status = lab(0);
        let feed = Feed::new(status.clone(), Duration::from_secs(1));
        let wide = screen(&mut ReceiverPage::default(), &feed, (200, 40)).join("\n");
        assert!(!wide.contains("key 4998e76a915e5ab5"), "{wide}");
        let open = Status {
            access: srap_status::Access {
                open: true,
                ..Default::default()
            },
            ..status
        };
        let feed = Feed::new(open, Duration::from_secs(1));
        let small = screen(&mut ReceiverPage::default(), &feed, (80, 24)).join("\n");
        assert!(
            small.contains("OPEN to any address, no key (--open)"),
            "{small}"
        );
    }

    #[test]
    fn at_80_by_24_every_flow_is_reachable_and_whole() {
        let status = lab(0);
        let feed = Feed::new(status.clone(), Duration::from_secs(1));
        let mut page = ReceiverPage::default();
        let first = screen(&mut page, &feed, (80, 24));
        let all = first.join("\n");
        assert!(
            first[0].starts_with("srap status · receiver s2977x3r · 16 flows"),
            "{all}"
        );
        assert!(all.contains("no collisions"), "{all}");
        assert!(!all.contains("COLLISION"), "a healthy lab run: {all}");
        assert!(
            all.contains("emu.cpu") && all.contains("emulated receive CPUs"),
            "{all}"
        );
        let visible = flow_rows(&first).len();
        assert!(visible >= 5, "{all}");
        assert!(all.contains(&format!("flows 1–{visible} of 16")), "{all}");
        // Page down to the end: every source seen, each row whole.
        let mut seen = BTreeSet::new();
        for _ in 0..4 {
            let text = screen(&mut page, &feed, (80, 24));
            for row in flow_rows(&text) {
                let cells: Vec<&str> = row.split_whitespace().collect();
                // source destination queue emu.cpu Gbit/s planned pred.q CoV
                assert_eq!(cells.len(), 8, "{row}");
                assert_eq!(cells[1], "10.199.250.2:5202", "{row}");
                assert_eq!(cells[4], "0.93", "{row}");
                seen.insert(cells[0].to_owned());
            }
            page.key(KeyCode::PageDown, &status);
        }
        assert_eq!(seen.len(), 16, "{seen:?}");
        let last = screen(&mut page, &feed, (80, 24)).join("\n");
        assert!(
            last.contains(&format!("flows {}–16 of 16", 17 - visible)),
            "{last}"
        );
        page.key(KeyCode::Home, &status);
        let home = screen(&mut page, &feed, (80, 24)).join("\n");
        assert!(home.contains(&format!("flows 1–{visible} of 16")), "{home}");
    }

    #[test]
    fn collisions_are_marked_where_flows_share_a_queue_and_can_be_filtered() {
        let status = lab(2);
        let feed = Feed::new(status.clone(), Duration::from_secs(1));
        let mut page = ReceiverPage::default();
        let text = screen(&mut page, &feed, (160, 45));
        let all = text.join("\n");
        assert!(
            all.contains("COLLISIONS: 1 queues, 1 emulated CPUs"),
            "{all}"
        );
        // The meters: queue 5 and emulated CPU 5 carry three flows.
        assert_eq!(all.matches(" 5[").count(), 2, "{all}");
        assert_eq!(all.matches("3 2.79]!").count(), 2, "{all}");
        let colliding: Vec<_> = flow_rows(&text)
            .into_iter()
            .filter(|r| r.contains("COLLISION"))
            .collect();
        assert_eq!(colliding.len(), 3, "{all}");
        let sources: Vec<&str> = colliding
            .iter()
            .filter_map(|r| r.split_whitespace().next())
            .collect();
        assert_eq!(
            sources,
            [
                "10.199.250.1:10005",
                "10.199.250.1:20000",
                "10.199.250.1:20001"
            ]
        );
        // Header figures agree with the rows: 18 flows, all in view.
        assert!(text[0].contains("18 flows"), "{all}");
        assert!(all.contains("flows 1–18 of 18"), "{all}");
        page.key(KeyCode::Char('c'), &status);
        let only = screen(&mut page, &feed, (160, 45));
        assert_eq!(flow_rows(&only).len(), 3, "{}", only.join("\n"));
        assert!(
            only.join("\n")
                .contains("flows 1–3 of 3 · by queue · collisions only, of 18")
        );
        page.key(KeyCode::Char('s'), &status);
        page.key(KeyCode::Char('s'), &status);
        let by_rate = screen(&mut page, &feed, (160, 45)).join("\n");
        assert!(by_rate.contains("by Gbit/s"), "{by_rate}");
    }

    #[test]
    fn a_dead_agent_is_said_at_the_top_and_the_old_data_stays_dimmed() {
        let status = lab(0);
        let mut feed = Feed::new(status.clone(), Duration::from_secs(1));
        feed.update(Err(
            "nothing answers on /tmp/srap-lab-s2977x4/receiver.sock: the receiver agent that \
             made it has stopped"
                .into(),
        ));
        let mut page = ReceiverPage::default();
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        let chrome = Chrome {
            control: Path::new("/tmp/srap-lab-s2977x4/receiver.sock"),
            interval: Duration::from_secs(1),
            help: false,
        };
        terminal
            .draw(|frame| draw(frame, &mut page, &feed, &chrome))
            .expect("draw");
        let buffer = terminal.backend().buffer();
        let row = |y: u16| (0..80).map(|x| buffer[(x, y)].symbol()).collect::<String>();
        assert!(
            row(0).starts_with("STALE: no fresh data from the receiver agent"),
            "{}",
            row(0)
        );
        let banner: String = (0..4).map(row).collect();
        assert!(banner.contains("Why: nothing answers on"), "{banner}");
        let dimmed = (0..80).any(|x| {
            (0..24).any(|y| {
                buffer[(x, y)].symbol() == "1" && buffer[(x, y)].modifier.contains(Modifier::DIM)
            })
        });
        assert!(dimmed, "the old figures are dimmed");
        feed.update(Ok(status));
        let text = screen(&mut page, &feed, (80, 24));
        assert!(text[0].starts_with("srap status"), "recovered: {}", text[0]);
    }

    #[test]
    fn any_terminal_size_draws_without_a_panic() {
        let status = lab(2);
        let mut feed = Feed::new(status, Duration::from_secs(1));
        let mut page = ReceiverPage::default();
        for stale in [false, true] {
            if stale {
                feed.update(Err("nothing answers".into()));
            }
            for help in [false, true] {
                for (w, h) in [(1, 1), (2, 3), (20, 5), (40, 10), (79, 23), (300, 100)] {
                    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
                    let chrome = Chrome {
                        control: Path::new("/run/srap/receiver.sock"),
                        interval: Duration::from_secs(1),
                        help,
                    };
                    terminal
                        .draw(|frame| draw(frame, &mut page, &feed, &chrome))
                        .expect("draw");
                }
            }
        }
    }
}
