//! Meters like htop's CPU bars: one per receive CPU (or queue), its bar the
//! rate against the busiest, its label the flows and Gbit/s on it, a
//! collision in red with a `!`. Laid out in as many columns as the width
//! takes, filled top to bottom then left to right.

use ratatui::{
    style::{Color, Style},
    text::{Line, Span},
};

use super::format::{gbps, red};

/// One meter's reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meter {
    pub id: u32,
    pub flows: usize,
    pub gbps: f64,
    pub collision: bool,
}

/// Meters laid out for a width and a number of rows.
#[derive(Debug, Default)]
pub struct Grid {
    pub lines: Vec<Line<'static>>,
    /// Idle meters left out for want of rows.
    pub hidden: usize,
}

/// Shortest bar worth drawing.
const BAR_MIN: usize = 4;
/// Longest bar: wider cells only spread the meters apart.
const BAR_MAX: usize = 30;

/// The label's parts, widest of all meters, so labels line up.
struct Widths {
    id: usize,
    flows: usize,
    gbps: usize,
}

impl Widths {
    fn of(meters: &[Meter]) -> Self {
        let most = |f: fn(&Meter) -> usize| meters.iter().map(f).max().unwrap_or(1);
        Self {
            id: most(|m| m.id.to_string().len()),
            flows: most(|m| m.flows.to_string().len()),
            gbps: most(|m| gbps(m.gbps).len()),
        }
    }

    /// `ID[` + `]!` + label around the bar, and the gap after the cell.
    fn frame(&self) -> usize {
        self.id + 1 + self.flows + 1 + self.gbps + 2 + 1
    }
}

/// The meters that fit `width` × `rows` cells (`rows` ≥ 1). When they do not
/// all fit, the idle ones give way first.
pub fn grid(meters: &[Meter], width: usize, rows: usize) -> Grid {
    if meters.is_empty() || rows == 0 {
        return Grid::default();
    }
    let widths = Widths::of(meters);
    let columns = (width / (widths.frame() + BAR_MIN)).max(1);
    let mut shown: Vec<Meter> = meters.to_vec();
    let mut hidden = 0;
    let room = columns.saturating_mul(rows);
    if shown.len() > room {
        shown.retain(|m| m.flows > 0);
        shown.truncate(room);
        hidden = meters.len() - shown.len();
    }
    let used_rows = shown.len().div_ceil(columns);
    let bar = (width / columns)
        .saturating_sub(widths.frame())
        .clamp(1, BAR_MAX);
    let busiest = shown.iter().map(|m| m.gbps).fold(0.0, f64::max);
    let lines = (0..used_rows)
        .map(|row| {
            let spans = (0..columns)
                .filter_map(|col| shown.get(col * used_rows + row))
                .flat_map(|m| cell(m, &widths, bar, busiest))
                .collect::<Vec<_>>();
            Line::from(spans)
        })
        .collect();
    Grid { lines, hidden }
}

/// `12[||||||   1 0.93]  ` — a collision in red, marked `!`.
fn cell(m: &Meter, w: &Widths, bar: usize, busiest: f64) -> Vec<Span<'static>> {
    let filled = if busiest > 0.0 && m.gbps > 0.0 {
        (((m.gbps / busiest) * bar as f64).round() as usize).clamp(1, bar)
    } else {
        0
    };
    let (bar_style, label_style) = if m.collision {
        (red(), red())
    } else if m.flows > 0 {
        (Style::new().fg(Color::Green), Style::new())
    } else {
        let dim = Style::new().fg(Color::DarkGray);
        (dim, dim)
    };
    vec![
        Span::styled(format!("{:>1$}", m.id, w.id), Style::new().fg(Color::Cyan)),
        Span::raw("["),
        Span::styled("|".repeat(filled), bar_style),
        Span::raw(" ".repeat(bar - filled)),
        Span::styled(
            format!(
                "{:>fw$} {:>gw$}",
                m.flows,
                gbps(m.gbps),
                fw = w.flows,
                gw = w.gbps
            ),
            label_style,
        ),
        Span::raw("]"),
        Span::styled(if m.collision { "!" } else { " " }, label_style),
        Span::raw(" "),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meters(n: u32) -> Vec<Meter> {
        (0..n)
            .map(|id| Meter {
                id,
                flows: usize::from(id % 2 == 0) * if id == 4 { 2 } else { 1 },
                gbps: if id % 2 == 0 { 0.93 } else { 0.0 },
                collision: id == 4,
            })
            .collect()
    }

    #[test]
    fn every_meter_in_columns_with_whole_labels() {
        let grid = grid(&meters(32), 80, 16);
        assert_eq!(grid.hidden, 0);
        let text: Vec<String> = grid.lines.iter().map(ToString::to_string).collect();
        assert!(text.iter().all(|l| l.chars().count() <= 80), "{text:#?}");
        // Five columns of 7 at 80 cells, filled down first.
        assert_eq!(text.len(), 7, "{text:#?}");
        assert!(
            text[0].starts_with(" 0[") && text[0].contains(" 7["),
            "{text:#?}"
        );
        let all = text.join("\n");
        for id in 0..32 {
            assert!(all.contains(&format!("{id:>2}[")), "meter {id}: {all}");
        }
        assert!(all.contains("2 0.93]!"), "the collision is marked: {all}");
        assert_eq!(all.matches("0.93]").count(), 16, "{all}");
    }

    #[test]
    fn idle_meters_give_way_when_rows_run_short() {
        let grid = grid(&meters(32), 80, 2);
        assert_eq!(grid.hidden, 22, "10 of the 16 busy meters in 2 rows of 5");
        let all: String = grid.lines.iter().map(|l| l.to_string() + "\n").collect();
        assert!(!all.contains(" 1["), "{all}");
        assert!(all.contains("14["), "{all}");
    }
}
