//! Tables that fit the terminal: the columns that matter most are kept,
//! the others dropped whole, so a number or an address is never cut. Only
//! a column marked as a name may be shortened, and then it ends with `…`.

use ratatui::{
    style::Style,
    text::{Line, Span},
};

/// How a column's cells sit in their width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column: its title, its cells (one per row) and how it yields to the
/// width available.
#[derive(Debug, Clone)]
pub struct Column {
    pub title: String,
    pub align: Align,
    /// Lower first: kept before every column with a higher number.
    pub priority: u8,
    /// A name (an agent's version string, a reason): may be shortened with
    /// `…` instead of being dropped. Numbers and addresses never are.
    pub name: bool,
    pub cells: Vec<String>,
}

impl Column {
    pub fn new(title: &str, align: Align, priority: u8, cells: Vec<String>) -> Self {
        Self {
            title: title.to_owned(),
            align,
            priority,
            name: false,
            cells,
        }
    }

    /// A name column (see [`Column::name`]).
    pub fn name(mut self) -> Self {
        self.name = true;
        self
    }

    /// The width that shows every cell whole.
    fn natural(&self) -> usize {
        self.cells
            .iter()
            .map(|c| width(c))
            .chain([width(&self.title)])
            .max()
            .unwrap_or(0)
    }
}

/// Display width of `text` (every character SRAP prints is one cell wide).
pub fn width(text: &str) -> usize {
    text.chars().count()
}

/// `text` in at most `room` cells: whole, or cut with `…`.
pub fn cut(text: &str, room: usize) -> String {
    if width(text) <= room {
        return text.to_owned();
    }
    if room == 0 {
        return String::new();
    }
    let mut short: String = text.chars().take(room - 1).collect();
    short.push('…');
    short
}

/// Narrowest a name column is shortened to before it is dropped instead.
const NAME_MIN: usize = 6;
const GAP: usize = 1;

/// The columns chosen for `width` cells: (index into `columns`, width), in
/// the order of `columns`.
pub fn fit(columns: &[Column], width: usize) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by_key(|&i| columns[i].priority);
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    let mut used = 0;
    // By priority: a column whole if it fits (a narrow one of low priority
    // may still fit where a wide one did not), a name cut into what is
    // left if at least NAME_MIN is.
    for &i in &order {
        let gap = if chosen.is_empty() { 0 } else { GAP };
        let room = width.saturating_sub(used + gap);
        let natural = columns[i].natural();
        let given = if natural <= room {
            natural
        } else if columns[i].name && room >= NAME_MIN {
            room
        } else {
            continue;
        };
        used += given + gap;
        chosen.push((i, given));
    }
    chosen.sort_by_key(|(i, _)| *i);
    chosen
}

/// The header line and one line per row of `columns` fitted to `width`.
/// `style(row)` styles a row's line.
pub fn render(
    columns: &[Column],
    width: usize,
    header: Style,
    rows: impl IntoIterator<Item = (usize, Style)>,
) -> Vec<Line<'static>> {
    let chosen = fit(columns, width);
    let line = |texts: Vec<String>, style: Style| {
        let text = chosen
            .iter()
            .zip(texts)
            .map(|(&(i, w), text)| pad(&cut(&text, w), w, columns[i].align))
            .collect::<Vec<_>>()
            .join(" ");
        Line::from(Span::styled(text, style))
    };
    let titles = chosen
        .iter()
        .map(|&(i, _)| columns[i].title.clone())
        .collect();
    let mut lines = vec![line(titles, header)];
    for (row, style) in rows {
        let cells = chosen
            .iter()
            .map(|&(i, _)| columns[i].cells.get(row).cloned().unwrap_or_default())
            .collect();
        lines.push(line(cells, style));
    }
    lines
}

fn pad(text: &str, w: usize, align: Align) -> String {
    match align {
        Align::Left => format!("{text:<w$}"),
        Align::Right => format!("{text:>w$}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Vec<Column> {
        vec![
            Column::new("source", Align::Left, 0, vec!["10.199.250.1:10041".into()]),
            Column::new("packets", Align::Right, 9, vec!["2685123".into()]),
            Column::new("Gbit/s", Align::Right, 1, vec!["12.95".into()]),
            Column::new("agent", Align::Left, 5, vec!["srap-agent 0.1.0".into()]).name(),
        ]
    }

    #[test]
    fn columns_are_dropped_whole_and_names_cut_with_an_ellipsis() {
        let cols = columns();
        // Everything fits: 18 + 1 + 7 + 1 + 6 + 1 + 16.
        assert_eq!(fit(&cols, 50), [(0, 18), (1, 7), (2, 6), (3, 16)]);
        // Too narrow for packets and the whole agent name: packets goes,
        // the name is cut.
        let chosen = fit(&cols, 35);
        assert_eq!(chosen, [(0, 18), (2, 6), (3, 9)]);
        let lines = render(&cols, 35, Style::new(), [(0, Style::new())]);
        let row = lines[1].to_string();
        assert_eq!(row, "10.199.250.1:10041  12.95 srap-age…");
        // Narrower than the source and a rate: the rate goes whole.
        assert_eq!(fit(&cols, 20), [(0, 18)]);
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}
