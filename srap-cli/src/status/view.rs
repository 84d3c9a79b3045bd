//! The dashboard's screen: one pure function from a snapshot to a frame, so
//! a test can draw it on ratatui's `TestBackend` and read it back.

use std::path::Path;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Paragraph, Row, Table},
};
use srap_common::wire::LandingVerdict;
use srap_host::status::{CpuRow, QueueRow, Status};

use super::format::{FLOW_COLUMNS, ago, cov, gbps, granted, landings, opt, ratio, verifier};

/// What the dashboard shows.
#[derive(Debug, Clone)]
pub struct Screen<'a> {
    pub status: &'a Status,
    /// Why the last refresh failed (the snapshot shown is older).
    pub error: Option<&'a str>,
    pub control: &'a Path,
    pub interval_ms: u64,
}

const LOAD_ROWS_MAX: usize = 16;

pub fn draw(frame: &mut Frame<'_>, screen: &Screen<'_>) {
    let status = screen.status;
    let load_rows = status
        .queues
        .len()
        .max(status.cpus.len())
        .max(status.rss_cpus.len())
        .clamp(1, LOAD_ROWS_MAX);
    let peer_rows = status.peers.len().clamp(1, 6);
    let [header, load, flows, peers, footer] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(load_rows as u16 + 3),
        Constraint::Min(5),
        Constraint::Length(peer_rows as u16 + 3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(frame, header, status);
    let [queues, rss_cpus, cpus] = Layout::horizontal([
        Constraint::Percentage(38),
        Constraint::Percentage(31),
        Constraint::Percentage(31),
    ])
    .areas(load);
    draw_queues(frame, queues, &status.queues);
    draw_cpus(frame, rss_cpus, "CPUs (queue_cpu)", &status.rss_cpus);
    draw_cpus(frame, cpus, "CPUs (verifier)", &status.cpus);
    draw_flows(frame, flows, status);
    draw_peers(frame, peers, status);
    let mut spans = vec![Span::raw(format!(
        " q/Esc/Ctrl-C quit · every {} ms · {}",
        screen.interval_ms,
        screen.control.display()
    ))];
    if let Some(error) = screen.error {
        spans.push(Span::styled(
            format!(" · refresh failed: {error}"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    frame.render_widget(Line::from(spans), footer);
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

fn collision_style() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

fn draw_header(frame: &mut Frame<'_>, area: Rect, status: &Status) {
    let collisions = status.collisions;
    let colliding = collisions.queues + collisions.rss_cpus > 0;
    let lines = vec![
        Line::from(vec![
            Span::raw(format!(
                "verifier {} · RSS version {} · {} peer(s) · {} active flows · {} Gbit/s · ",
                verifier(status),
                status.rss_version,
                status.peers.len(),
                status.active_flows,
                gbps(status.gbps)
            )),
            landings_span(status),
        ]),
        Line::from(vec![
            Span::styled(
                format!(
                    "collisions: {} queues, {} CPUs (queue_cpu), {} CPUs (verifier)",
                    collisions.queues, collisions.rss_cpus, collisions.cpus
                ),
                if colliding {
                    collision_style()
                } else {
                    Style::new().fg(Color::Green)
                },
            ),
            Span::raw(format!(
                " · prediction accuracy: queue {}, plan {}",
                ratio(status.accuracy.queue),
                ratio(status.accuracy.plan)
            )),
        ]),
    ];
    let block = Block::bordered().title(Span::styled(
        format!(" srap status — receiver {} ", status.iface),
        bold(),
    ));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// The closed loop's verdict, coloured by what it says.
fn landings_span(status: &Status) -> Span<'static> {
    let style = match status.landings.verdict {
        LandingVerdict::Agreed => Style::new().fg(Color::Green),
        LandingVerdict::Contradicted | LandingVerdict::TupleRewritten => collision_style(),
        LandingVerdict::Unknown => Style::new(),
    };
    Span::styled(landings(status), style)
}

/// The rows that fit in `room`: all of them, or the busy ones first.
fn fitting<T>(rows: &[T], room: usize, busy: impl Fn(&T) -> bool) -> (Vec<&T>, usize) {
    if rows.len() <= room {
        return (rows.iter().collect(), 0);
    }
    let shown: Vec<&T> = rows.iter().filter(|r| busy(r)).take(room).collect();
    let hidden = rows.len() - shown.len();
    (shown, hidden)
}

fn title(name: &str, hidden: usize) -> String {
    if hidden > 0 {
        format!(" {name} ({hidden} idle hidden) ")
    } else {
        format!(" {name} ")
    }
}

fn draw_queues(frame: &mut Frame<'_>, area: Rect, queues: &[QueueRow]) {
    let room = usize::from(area.height.saturating_sub(3));
    let (shown, hidden) = fitting(queues, room, |q| q.flows > 0);
    let rows = shown.into_iter().map(|q| {
        let row = Row::new([
            q.queue.to_string(),
            opt(q.cpu),
            q.flows.to_string(),
            gbps(q.gbps),
            q.packets.to_string(),
            if q.collision { "COLLISION" } else { "" }.to_owned(),
        ]);
        if q.collision {
            row.style(collision_style())
        } else {
            row
        }
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(5),
            Constraint::Length(4),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(11),
            Constraint::Length(9),
        ],
    )
    .header(Row::new(["queue", "cpu", "flows", "Gbit/s", "packets", ""]).style(bold()))
    .block(Block::bordered().title(title("receive queues", hidden)));
    frame.render_widget(table, area);
}

fn draw_cpus(frame: &mut Frame<'_>, area: Rect, name: &str, cpus: &[CpuRow]) {
    let room = usize::from(area.height.saturating_sub(3));
    let (shown, hidden) = fitting(cpus, room, |c| c.flows > 0);
    let rows = shown.into_iter().map(|c| {
        let row = Row::new([
            c.cpu.to_string(),
            c.flows.to_string(),
            gbps(c.gbps),
            c.packets.to_string(),
            if c.collision { "COLLISION" } else { "" }.to_owned(),
        ]);
        if c.collision {
            row.style(collision_style())
        } else {
            row
        }
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(11),
            Constraint::Length(9),
        ],
    )
    .header(Row::new(["cpu", "flows", "Gbit/s", "packets", ""]).style(bold()))
    .block(Block::bordered().title(title(name, hidden)));
    frame.render_widget(table, area);
}

fn draw_flows(frame: &mut Frame<'_>, area: Rect, status: &Status) {
    let colliding: std::collections::BTreeSet<u32> = status
        .queues
        .iter()
        .filter(|q| q.collision)
        .map(|q| q.queue)
        .collect();
    let rows = status.flows.iter().map(|f| {
        let mispredicted =
            f.queue.is_some() && f.predicted_queue.is_some() && f.queue != f.predicted_queue;
        let off_plan = f.planned_cpu.is_some() && f.rss_cpu != f.planned_cpu;
        let note = match (mispredicted, off_plan) {
            (true, true) => "MISPREDICTED, OFF PLAN",
            (true, false) => "MISPREDICTED",
            (false, true) => "OFF PLAN",
            (false, false) => "",
        };
        let row = Row::new([
            f.src.to_string(),
            f.dst.to_string(),
            opt(f.queue),
            f.cpu.to_string(),
            opt(f.predicted_queue),
            opt(f.predicted_cpu),
            opt(f.planned_cpu),
            gbps(f.gbps),
            cov(f.rate_cov),
            f.moves.to_string(),
            note.to_owned(),
        ]);
        if f.queue.is_some_and(|q| colliding.contains(&q)) {
            row.style(collision_style())
        } else if !note.is_empty() {
            row.style(Style::new().fg(Color::Yellow))
        } else {
            row
        }
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(22),
            Constraint::Length(22),
            Constraint::Length(5),
            Constraint::Length(4),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(6),
            Constraint::Min(12),
        ],
    )
    .header(Row::new(FLOW_COLUMNS.into_iter().chain([""])).style(bold()))
    .block(Block::bordered().title(format!(" flows ({}) ", status.flows.len())));
    frame.render_widget(table, area);
}

fn draw_peers(frame: &mut Frame<'_>, area: Rect, status: &Status) {
    let rows = status.peers.iter().map(|p| {
        Row::new([
            p.addr.clone(),
            p.agent.clone(),
            ago(status.unix_ms, Some(p.connected_unix_ms)),
            ago(status.unix_ms, p.last_plan_unix_ms),
            opt(p.plan_version),
            p.flows.to_string(),
            granted(p),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(24),
            Constraint::Length(24),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Length(6),
            Constraint::Min(16),
        ],
    )
    .header(
        Row::new([
            "sender",
            "agent",
            "connected",
            "last plan",
            "plan version",
            "flows",
            "granted CPUs",
        ])
        .style(bold()),
    )
    .block(Block::bordered().title(if status.peers.is_empty() {
        " peers (none connected) ".to_owned()
    } else {
        format!(" peers ({}) ", status.peers.len())
    }));
    frame.render_widget(table, area);
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};
    use srap_host::status::{Collisions, FlowRow, PeerRow, Ratio, VerifierState};

    use super::*;

    fn status() -> Status {
        let flow = |port: u16, queue: u32, predicted: u32| FlowRow {
            src: format!("10.199.9.1:{port}").parse().expect("addr"),
            dst: "10.199.9.2:5201".parse().expect("addr"),
            queue: Some(queue),
            cpu: 1,
            rss_cpu: Some(queue),
            predicted_queue: Some(predicted),
            predicted_cpu: Some(predicted),
            planned_cpu: None,
            gbps: 1.5,
            rate_cov: Some(0.04),
            packets: 1000,
            bytes: 1_500_000,
            moves: 0,
        };
        let queue = |queue: u32, flows: usize| QueueRow {
            queue,
            cpu: Some(queue),
            flows,
            gbps: 1.5 * flows as f64,
            packets: 1000 * flows as u64,
            bytes: 0,
            collision: flows > 1,
        };
        Status {
            iface: "vrx".into(),
            verifier: VerifierState {
                hook: Some("xdp (driver)".into()),
                error: None,
            },
            rss_version: 2,
            unix_ms: 100_000,
            interval_ms: 1000,
            idle_after_ms: 5000,
            active_flows: 3,
            gbps: 4.5,
            queues: vec![queue(0, 2), queue(1, 0), queue(2, 1), queue(3, 0)],
            cpus: vec![CpuRow {
                cpu: 1,
                flows: 3,
                gbps: 4.5,
                packets: 3000,
                bytes: 0,
                collision: true,
            }],
            rss_cpus: vec![],
            flows: vec![flow(40001, 0, 0), flow(40002, 0, 0), flow(40003, 2, 3)],
            collisions: Collisions {
                queues: 1,
                cpus: 1,
                rss_cpus: 1,
            },
            accuracy: srap_host::status::Accuracy {
                queue: Ratio {
                    matched: 2,
                    total: 3,
                },
                plan: Ratio::default(),
            },
            landings: srap_host::status::Landings {
                verdict: LandingVerdict::Contradicted,
                matched: 1,
                judged: 6,
            },
            peers: vec![PeerRow {
                addr: "10.199.9.1:40000".into(),
                agent: "srap-agent 0.1.0".into(),
                connected_unix_ms: 40_000,
                last_plan_unix_ms: Some(97_000),
                plan_version: Some(2),
                granted: "0-4".into(),
                flows: 5,
                grant_epoch: 3,
                grant_applied: true,
            }],
            ..Status::default()
        }
    }

    fn screen_text(width: u16, height: u16, screen: &Screen<'_>) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| draw(frame, screen)).expect("draw");
        let buffer = terminal.backend().buffer();
        let mut text = String::new();
        for y in 0..buffer.area.height {
            for x in 0..buffer.area.width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }

    #[test]
    fn the_dashboard_shows_loads_collisions_flows_and_peers() {
        let status = status();
        let screen = Screen {
            status: &status,
            error: Some("agent gone"),
            control: Path::new("/run/srap/receiver.sock"),
            interval_ms: 1000,
        };
        let text = screen_text(140, 40, &screen);
        for needle in [
            "srap status — receiver vrx",
            "verifier xdp (driver) · RSS version 2 · 1 peer(s) · 3 active flows · 4.50 Gbit/s",
            "collisions: 1 queues, 1 CPUs (queue_cpu), 1 CPUs (verifier)",
            "prediction accuracy: queue 2/3 (67%), plan -",
            "landings CONTRADICT the description 1/6",
            "receive queues",
            "COLLISION",
            "flows (3)",
            "10.199.9.1:40003",
            "MISPREDICTED",
            "0.04",
            "peers (1)",
            "srap-agent 0.1.0",
            "60 s ago",
            "3 s ago",
            "refresh failed: agent gone",
        ] {
            assert!(text.contains(needle), "{needle:?} not on screen:\n{text}");
        }
    }

    #[test]
    fn idle_rows_give_way_on_a_small_screen() {
        let mut status = status();
        status.queues = (0..32)
            .map(|queue| QueueRow {
                queue,
                flows: usize::from(queue == 17),
                ..QueueRow::default()
            })
            .collect();
        let screen = Screen {
            status: &status,
            error: None,
            control: Path::new("/tmp/s.sock"),
            interval_ms: 500,
        };
        let text = screen_text(120, 30, &screen);
        assert!(text.contains("receive queues (31 idle hidden)"), "{text}");
        assert!(text.contains("every 500 ms"));
    }
}
