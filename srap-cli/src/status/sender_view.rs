//! The sender agent's live page (`srap status --sender` on a terminal):
//! the binder's counters with their rates, and every receiver followed —
//! its link, the description version the plan was made with, whether
//! steering toward it is on, its addresses and open flows, its grant —
//! scrollable like the receiver's flows — and every open flow of the
//! steered cgroup with its CPU at both ends, planned and seen (Tab moves
//! the scrolling between the two tables). Counters are shown as the agent
//! names them, so new ones appear without a change here.

use std::{path::Path, time::Instant};

use ratatui::{
    Frame,
    crossterm::event::KeyCode,
    layout::Rect,
    style::{Color, Style},
    text::{Line, Span},
    widgets::Paragraph,
};
use srap_status::{ControlError, SenderStatus, request_sender_status, sender::SenderFlowRow};

use super::{
    columns::{Align, Column, cut, render},
    format::{bold, header, key_brief, red},
    list::{Scroll, range_text},
    live::{Page, pack, wrap},
    sender::steering,
};

/// The sender page's state between frames.
#[derive(Debug, Default)]
pub struct SenderPage {
    scroll: Scroll,
    flows: Scroll,
    /// The table the scrolling keys move.
    focus: Focus,
    /// The binder's counters at the last two answers, to make rates.
    counters: Vec<(Instant, Vec<(String, u64)>)>,
}

/// Which table scrolls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Focus {
    #[default]
    Receivers,
    Flows,
}

/// One row per open flow: where it goes and its CPU at both ends.
struct FlowLine {
    cells: [String; 5],
    off_plan: bool,
}

fn flow_lines(flows: &[SenderFlowRow]) -> Vec<FlowLine> {
    flows
        .iter()
        .map(|f| FlowLine {
            cells: super::sender::flow_cells(f),
            off_plan: f.receiver_cpu_off_plan,
        })
        .collect()
}

fn flow_columns(lines: &[FlowLine]) -> Vec<Column> {
    columns_of(
        lines.iter().map(|l| &l.cells),
        [
            ("flow", Align::Left, 0),
            ("to", Align::Left, 3),
            ("receiver CPU p/s", Align::Right, 1),
            ("local CPU p/s", Align::Right, 2),
            ("reader CPU c/r", Align::Right, 4),
        ],
    )
}

/// The `i`-th column of `rows` for the `i`-th (title, align, priority) of
/// `spec`: one spec per cell of a row, by type.
fn columns_of<'a, const N: usize>(
    rows: impl Iterator<Item = &'a [String; N]> + Clone,
    spec: [(&str, Align, u8); N],
) -> Vec<Column> {
    (0..N)
        .zip(spec)
        .map(|(i, (title, align, priority))| {
            let cells = rows.clone().map(|row| row[i].clone()).collect();
            Column::new(title, align, priority, cells)
        })
        .collect()
}

/// One row per receiver address.
struct AddressLine {
    cells: [String; 9],
    away: bool,
}

fn address_lines(status: &SenderStatus) -> Vec<AddressLine> {
    let mut lines = Vec::new();
    for r in &status.receivers {
        let (epoch, cpus) =
            r.grant
                .as_ref()
                .map_or(("-".to_owned(), "every CPU".to_owned()), |g| {
                    (
                        g.epoch.to_string(),
                        srap_host::cpulist::format(g.cpus.iter().copied()),
                    )
                });
        for a in &r.addresses {
            lines.push(AddressLine {
                cells: [
                    r.peer.clone(),
                    r.link.clone(),
                    r.version.map_or("-".into(), |v| v.to_string()),
                    steering(r).into(),
                    a.addr.map_or("-".into(), |ip| ip.to_string()),
                    a.open_flows.to_string(),
                    a.slots.to_string(),
                    format!("{epoch}: {cpus}"),
                    key_brief(r.key.as_ref()),
                ],
                away: r.link != "connected",
            });
        }
    }
    lines
}

fn receiver_columns(lines: &[AddressLine]) -> Vec<Column> {
    columns_of(
        lines.iter().map(|l| &l.cells),
        [
            ("receiver", Align::Left, 0),
            ("link", Align::Left, 1),
            ("desc v", Align::Right, 2),
            ("steering", Align::Left, 3),
            ("address", Align::Left, 6),
            ("flows", Align::Right, 4),
            ("slots", Align::Right, 7),
            ("grant: CPUs", Align::Left, 5),
            ("key", Align::Left, 8),
        ],
    )
}

impl SenderPage {
    /// `name total (+rate/s)` for every counter, packed into lines.
    fn counter_lines(&self, status: &SenderStatus, width: usize) -> Vec<Line<'static>> {
        let rates = self.rates();
        let mut pieces: Vec<Vec<Span<'static>>> = super::sender::shown_counters(status)
            .map(|(name, total)| {
                let rate = rates
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("".to_owned(), |(_, r)| format!(" {r:+.1}/s"));
                let style = if name == "steered" || rate.is_empty() || rate == " +0.0/s" {
                    Style::new()
                } else {
                    Style::new().fg(Color::Yellow)
                };
                vec![
                    Span::styled(name.to_owned(), Style::new().fg(Color::Cyan)),
                    Span::raw(format!(" {total}")),
                    Span::styled(rate, style),
                ]
            })
            .collect();
        pieces.extend(status.bind_errnos.iter().map(|(errno, count)| {
            vec![
                Span::styled("bind refused: ", Style::new().fg(Color::Yellow)),
                Span::raw(format!("{errno} ×{count}")),
            ]
        }));
        let mut lines = vec![Line::from(Span::styled(
            "binder counters (total, per second; the rest 0)",
            bold(),
        ))];
        lines.extend(pack(pieces, width, 4));
        lines
    }

    /// Each counter's change per second between the last two answers.
    fn rates(&self) -> Vec<(String, f64)> {
        let [(t0, before), (t1, now)] = match self.counters.as_slice() {
            [a, b] => [a, b],
            _ => return Vec::new(),
        };
        let dt = t1.duration_since(*t0).as_secs_f64();
        if dt <= 0.0 {
            return Vec::new();
        }
        now.iter()
            .filter_map(|(name, value)| {
                let old = before.iter().find(|(n, _)| n == name)?.1;
                Some((name.clone(), value.saturating_sub(old) as f64 / dt))
            })
            .collect()
    }
}

/// This host's NIC (`--steer local|both`), its verdict and key, wrapped;
/// yellow while local steering is paused.
fn local_lines(status: &SenderStatus, width: usize) -> Vec<Line<'static>> {
    let Some(local) = &status.local else {
        return Vec::new();
    };
    let style = if local.paused {
        Style::new().fg(Color::Yellow)
    } else {
        Style::new()
    };
    super::sender::local_summary(local)
        .iter()
        .flat_map(|line| wrap(line, width))
        .map(|line| Line::from(Span::styled(line, style)))
        .collect()
}

/// Each bond on the route and its members, wrapped; yellow while its
/// balancing is off for a reason other than the bond's own (paused by its
/// counters, say).
fn bond_lines(status: &SenderStatus, width: usize) -> Vec<Line<'static>> {
    status
        .bonds
        .iter()
        .flat_map(|bond| {
            let style = if bond.counters.as_deref().is_some_and(|c| c != "agree") {
                Style::new().fg(Color::Yellow)
            } else {
                Style::new()
            };
            super::sender::bond_summary(bond)
                .into_iter()
                .flat_map(move |line| wrap(&line, width))
                .map(move |line| Line::from(Span::styled(line, style)))
        })
        .collect()
}

/// Why each receiver away is, wrapped under the table.
fn away_lines(status: &SenderStatus, width: usize) -> Vec<Line<'static>> {
    let red = Style::new().fg(Color::Red);
    status
        .receivers
        .iter()
        .filter_map(|r| Some((r, r.reason.as_ref()?)))
        .flat_map(|(r, reason)| wrap(&format!("{} away: {reason}", r.peer), width))
        .map(|line| Line::from(Span::styled(line, red)))
        .collect()
}

impl Page for SenderPage {
    type Snapshot = SenderStatus;
    const AGENT: &'static str = "sender agent";

    fn fetch_line(path: &Path) -> Result<(SenderStatus, String), ControlError> {
        request_sender_status(path)
    }

    fn update(&mut self, status: &SenderStatus) {
        self.counters.push((Instant::now(), status.binder.clone()));
        if self.counters.len() > 2 {
            self.counters.remove(0);
        }
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, status: &SenderStatus) {
        let width = usize::from(area.width);
        let height = usize::from(area.height);
        let steering_text = if status.pin_dir.is_empty() {
            "not steering yet (no description from any receiver)".to_owned()
        } else {
            format!("cgroup {}", cut(&status.cgroup, 40))
        };
        let title = vec![
            vec![Span::styled("srap status --sender", bold())],
            vec![Span::raw(steering_text)],
            vec![Span::raw(format!("{} receivers", status.receivers.len()))],
            vec![Span::raw(format!("pins {}", cut(&status.pin_dir, 40)))],
        ];
        let mut lines = pack(title, width, 1);
        lines.extend(self.counter_lines(status, width));
        lines.extend(
            super::sender::occupancy_lines(&status.occupancy)
                .iter()
                .flat_map(|line| wrap(line, width))
                .map(|line| Line::from(Span::styled(line, red()))),
        );
        let rows = address_lines(status);
        let ids: Vec<String> = rows
            .iter()
            .map(|r| format!("{}>{}", r.cells[0], r.cells[4]))
            .collect();
        let away = away_lines(status, width);
        let mut local = local_lines(status, width);
        local.extend(
            super::sender::local_nics_summary(status)
                .iter()
                .flat_map(|line| wrap(line, width))
                .map(Line::from),
        );
        local.extend(bond_lines(status, width));
        local.extend(
            super::sender::mptcp_summary(status)
                .iter()
                .flat_map(|line| wrap(line, width))
                .map(Line::from),
        );
        let flows = flow_lines(&status.flows);
        let reasons = unknown_reasons(&status.flows, width);
        let room = height.saturating_sub(lines.len() + away.len() + local.len() + reasons.len());
        let (receiver_page, flow_page) = split_room(room, rows.len(), flows.len());
        let range = self.scroll.place(&ids, receiver_page);
        lines.push(self.table_title("receivers", &range, rows.len(), Focus::Receivers, width));
        let styled = range.map(|i| {
            let style = if rows[i].away { red() } else { Style::new() };
            (i, self.focused_style(Focus::Receivers, i, style))
        });
        lines.extend(render(&receiver_columns(&rows), width, header(), styled));
        lines.extend(away);
        lines.extend(local);
        if !flows.is_empty() {
            lines.extend(self.flow_table(&flows, flow_page, width));
            lines.extend(reasons);
        }
        frame.render_widget(Paragraph::new(lines), area);
    }

    fn key(&mut self, code: KeyCode, status: &SenderStatus) {
        if code == KeyCode::Tab {
            self.focus = match self.focus {
                Focus::Receivers if !status.flows.is_empty() => Focus::Flows,
                _ => Focus::Receivers,
            };
            return;
        }
        match self.focus {
            Focus::Receivers => self.scroll.key(code, address_lines(status).len()),
            Focus::Flows => self.flows.key(code, status.flows.len()),
        };
    }

    fn keys(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("↑↓", "scroll"),
            ("PgUp PgDn", "page up, down"),
            ("Home End", "first, last row"),
            ("Tab", "receivers / flows"),
        ]
    }

    fn legend(&self) -> Vec<String> {
        vec![
            "Binder counters: how the binder's connect hook ended, in total and per second since the last refresh (steered: bound to a planned port; the others: why the kernel chose the port).".into(),
            "Receivers: one row per receiver address. link: connected, connecting or away; desc v: the description version the plan toward it was made with; steering: yes, paused (its landings contradict its description) or no (no description yet); flows: steered flows open toward it; slots: CPU slots planned; grant: its epoch and the receiver CPUs granted (every CPU without a grant); key: where its description's key comes from (reported: by the driver or a file, kernel: net.core.netdev_rss_key, learned mN: model N learned from landings) and how many of the bits planning needs its landings determine.".into(),
            "Flows: every open connection of the steered cgroup. receiver CPU p/s: the receiver CPU its description plans for the flow / the one the receiver's observer saw (! when they differ; - when unknown, the reason under the table); local CPU p/s: the same for this host's own NIC and the reverse tuple (--steer local|both).".into(),
        ]
    }
}

impl SenderPage {
    /// A table's title line: its name, the rows in view, and whether the
    /// scrolling keys move it.
    fn table_title(
        &self,
        name: &str,
        range: &std::ops::Range<usize>,
        len: usize,
        table: Focus,
        width: usize,
    ) -> Line<'static> {
        let mark = if self.focus == table { " ◂" } else { "" };
        let text = format!("{name} {}{mark}", range_text(range, len));
        Line::from(Span::styled(cut(&text, width), bold()))
    }

    /// Row `i`'s style: reversed when it is the focused table's selection.
    fn focused_style(&self, table: Focus, i: usize, style: Style) -> Style {
        match (self.focus == table, table) {
            (false, _) => style,
            (true, Focus::Receivers) => self.scroll.style(i, style),
            (true, Focus::Flows) => self.flows.style(i, style),
        }
    }

    /// The flows table in `page` rows.
    fn flow_table(&mut self, lines: &[FlowLine], page: usize, width: usize) -> Vec<Line<'static>> {
        let ids: Vec<String> = lines
            .iter()
            .map(|l| format!("{}>{}", l.cells[0], l.cells[1]))
            .collect();
        let range = self.flows.place(&ids, page);
        let mut out = vec![self.table_title("flows", &range, lines.len(), Focus::Flows, width)];
        let styled = range.map(|i| {
            let style = if lines[i].off_plan {
                red()
            } else {
                Style::new()
            };
            (i, self.focused_style(Focus::Flows, i, style))
        });
        out.extend(render(&flow_columns(lines), width, header(), styled));
        out
    }
}

/// Rows for the receivers' table and the flows' from `room` lines (each
/// table also takes a title and a header line): the receivers first, as
/// many as fit in half, the flows the rest.
fn split_room(room: usize, receivers: usize, flows: usize) -> (usize, usize) {
    if flows == 0 {
        return (room.saturating_sub(2), 0);
    }
    let tables = room.saturating_sub(4);
    let receiver_rows = receivers.min(tables / 2).max(usize::from(tables > 0));
    (receiver_rows, tables.saturating_sub(receiver_rows))
}

/// Why a receiver CPU seen is unknown, once per reason (yellow: not an
/// error, a view with a gap).
fn unknown_reasons(flows: &[SenderFlowRow], width: usize) -> Vec<Line<'static>> {
    let yellow = Style::new().fg(Color::Yellow);
    super::sender::unknown_reasons(flows)
        .into_iter()
        .flat_map(|(why, n)| wrap(&format!("receiver CPU unknown for {n}: {why}"), width))
        .map(|line| Line::from(Span::styled(line, yellow)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use super::*;
    use crate::status::{
        live::{Chrome, Feed, draw},
        sender::{learned_local, three_flows, two_receivers},
    };
    use ratatui::{Terminal, backend::TestBackend};

    /// The shared fixture with `steered` steered connections and a
    /// counter this view has never heard of (it shows like the others).
    fn status(steered: u64) -> SenderStatus {
        let mut status = two_receivers();
        status.binder = vec![
            ("steered".into(), steered),
            ("port_in_use_by_app".into(), 3),
        ];
        status
    }

    #[test]
    fn counters_as_rates_receivers_and_why_one_is_away() {
        let mut page = SenderPage::default();
        let t0 = Instant::now();
        page.counters = vec![
            (t0, status(10).binder),
            (t0 + Duration::from_secs(2), status(24).binder),
        ];
        let text = drawn_page(&mut page, status(24), (80, 24));
        assert!(text.contains("steered 24 +7.0/s"), "{text}");
        assert!(text.contains("port_in_use_by_app 3 +0.0/s"), "{text}");
        assert!(text.contains("receivers 1–2 of 2"), "{text}");
        assert!(text.contains("2: 0-3,7"), "{text}");
        assert!(
            text.contains("10.0.1.2:7447 away: cannot connect: Connection refused"),
            "{text}"
        );
    }

    /// The page drawn at `w`×`h` after `keys`, as text.
    fn drawn(status: SenderStatus, keys: &[KeyCode], size: (u16, u16)) -> String {
        let mut page = SenderPage::default();
        for &key in keys {
            page.key(key, &status);
        }
        drawn_page(&mut page, status, size)
    }

    /// `page` drawn at `w`×`h` with `status`, as text.
    fn drawn_page(page: &mut SenderPage, status: SenderStatus, (w, h): (u16, u16)) -> String {
        let feed = Feed::new(status, Duration::from_secs(1));
        let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        let chrome = Chrome {
            control: Path::new("/run/srap/sender.sock"),
            interval: Duration::from_secs(1),
            help: false,
        };
        terminal
            .draw(|frame| draw(frame, page, &feed, &chrome))
            .expect("draw");
        let buffer = terminal.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buffer[(x, y)].symbol()).collect::<String>() + "\n")
            .collect()
    }

    #[test]
    fn each_flow_at_both_ends_planned_and_seen_at_80_columns() {
        let status = SenderStatus {
            flows: three_flows(),
            local: Some(learned_local()),
            ..status(3)
        };
        let text = drawn(status.clone(), &[], (80, 24));
        assert!(
            text.contains("this host's NIC eth0 (--steer local): CPUs 0-3,8; landings"),
            "{text}"
        );
        assert!(
            text.contains("description version 2, key learned"),
            "{text}"
        );
        assert!(text.contains("receivers 1–2 of 2 ◂"), "{text}");
        assert!(text.contains("flows 1–3 of 3"), "{text}");
        assert!(text.contains("receiver CPU p/s"), "{text}");
        let row = |port: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("10.0.0.1:{port}")))
                .unwrap_or_else(|| panic!("flow {port} in view: {text}"))
                .to_owned()
        };
        assert!(row("40001").contains(" 3/3 "), "{text}");
        assert!(row("40002").contains(" !4/5 "), "{text}");
        assert!(row("40003").contains(" 6/- "), "{text}");
        assert!(
            text.contains("receiver CPU unknown for 1: the receiver speaks"),
            "{text}"
        );
        // Tab: the scrolling keys now move the flows.
        let text = drawn(status, &[KeyCode::Tab, KeyCode::End], (80, 24));
        assert!(text.contains("flows 1–3 of 3 ◂"), "{text}");
        assert!(!text.contains("of 2 ◂"), "{text}");
    }

    #[test]
    fn more_flows_than_fit_still_leave_room_for_why_one_is_unknown() {
        let mut flows = three_flows();
        let known = flows[0].clone();
        flows.extend((0..40).map(|_| known.clone()));
        let status = SenderStatus {
            flows,
            local: Some(learned_local()),
            ..status(3)
        };
        let text = drawn(status, &[], (80, 24));
        assert!(text.contains("of 43"), "{text}");
        assert!(
            text.contains("receiver CPU unknown for 1: the receiver speaks"),
            "{text}"
        );
    }

    #[test]
    fn any_terminal_size_draws_without_a_panic() {
        let mut page = SenderPage::default();
        let with_flows = SenderStatus {
            flows: three_flows(),
            ..status(1)
        };
        page.key(KeyCode::Tab, &with_flows);
        let feed = Feed::new(with_flows, Duration::from_secs(1));
        for (w, h) in [(1, 1), (20, 5), (79, 23), (300, 100)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            let chrome = Chrome {
                control: Path::new("/run/srap/sender.sock"),
                interval: Duration::from_secs(1),
                help: true,
            };
            terminal
                .draw(|frame| draw(frame, &mut page, &feed, &chrome))
                .expect("draw");
        }
    }
}
