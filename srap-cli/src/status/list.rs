//! A scrolling list: a selected row that arrows, PgUp/PgDn and Home/End
//! move, the rows around it in view, and `12–24 of 64` to say which. The
//! selection follows its row by identity when the rows move (a refresh, a
//! new sort), as htop's cursor stays on its process.

use ratatui::{
    crossterm::event::KeyCode,
    style::{Modifier, Style},
};

#[derive(Debug, Clone, Default)]
pub struct Scroll {
    /// Index of the selected row.
    selected: usize,
    /// Index of the first row in view.
    offset: usize,
    /// Rows in view at the last layout.
    page: usize,
    /// The selected row's identity, to find it again after a refresh.
    id: Option<String>,
}

impl Scroll {
    /// Moves for a key; false if the key is not a scrolling one.
    pub fn key(&mut self, code: KeyCode, len: usize) -> bool {
        let page = self.page.max(1);
        let last = len.saturating_sub(1);
        self.selected = match code {
            KeyCode::Down | KeyCode::Char('j') => (self.selected + 1).min(last),
            KeyCode::Up | KeyCode::Char('k') => self.selected.saturating_sub(1),
            KeyCode::PageDown | KeyCode::Char(' ') => {
                self.offset = (self.offset + page).min(len.saturating_sub(page));
                (self.selected + page).min(last)
            }
            KeyCode::PageUp => {
                self.offset = self.offset.saturating_sub(page);
                self.selected.saturating_sub(page)
            }
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => last,
            _ => return false,
        };
        self.id = None;
        true
    }

    /// Lays out `ids` (the rows' identities, in display order) in `page`
    /// rows: finds the selected row again and scrolls it into view. Returns
    /// the range in view.
    pub fn place(&mut self, ids: &[String], page: usize) -> std::ops::Range<usize> {
        self.page = page;
        let len = ids.len();
        if let Some(found) = self
            .id
            .as_ref()
            .and_then(|id| ids.iter().position(|i| i == id))
        {
            self.selected = found;
        }
        self.selected = self.selected.min(len.saturating_sub(1));
        self.id = ids.get(self.selected).cloned();
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if page > 0 && self.selected >= self.offset + page {
            self.offset = self.selected + 1 - page;
        }
        self.offset = self.offset.min(len.saturating_sub(page));
        self.offset..(self.offset + page).min(len)
    }

    #[cfg(test)]
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// `style` for row `i`, reversed if it is the selected one.
    pub fn style(&self, i: usize, style: Style) -> Style {
        if i == self.selected {
            style.add_modifier(Modifier::REVERSED)
        } else {
            style
        }
    }
}

/// `12–24 of 64` (1-based, inclusive), `0 of 0` for none.
pub fn range_text(range: &std::ops::Range<usize>, len: usize) -> String {
    if range.is_empty() {
        format!("0 of {len}")
    } else {
        format!("{}–{} of {len}", range.start + 1, range.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("flow{i}")).collect()
    }

    #[test]
    fn arrows_pages_and_ends_move_the_view() {
        let rows = ids(64);
        let mut s = Scroll::default();
        assert_eq!(range_text(&s.place(&rows, 13), 64), "1–13 of 64");
        s.key(KeyCode::PageDown, 64);
        assert_eq!(range_text(&s.place(&rows, 13), 64), "14–26 of 64");
        s.key(KeyCode::End, 64);
        assert_eq!(range_text(&s.place(&rows, 13), 64), "52–64 of 64");
        assert_eq!(s.selected(), 63);
        s.key(KeyCode::Home, 64);
        assert_eq!(range_text(&s.place(&rows, 13), 64), "1–13 of 64");
        for _ in 0..13 {
            s.key(KeyCode::Down, 64);
        }
        assert_eq!(range_text(&s.place(&rows, 13), 64), "2–14 of 64");
        s.key(KeyCode::PageUp, 64);
        assert_eq!(range_text(&s.place(&rows, 13), 64), "1–13 of 64");
        assert!(!s.key(KeyCode::Char('x'), 64));
        assert_eq!(range_text(&(0..0), 0), "0 of 0");
    }

    #[test]
    fn the_selection_follows_its_row_when_rows_move() {
        let mut rows = ids(20);
        let mut s = Scroll::default();
        s.place(&rows, 5);
        for _ in 0..7 {
            s.key(KeyCode::Down, 20);
        }
        s.place(&rows, 5);
        assert_eq!(s.selected(), 7);
        rows.reverse();
        let range = s.place(&rows, 5);
        assert_eq!(s.selected(), 12, "flow7 is now the 13th row");
        assert!(range.contains(&12), "{range:?}");
        rows.truncate(3);
        s.place(&rows, 5);
        assert_eq!(s.selected(), 2, "gone: the nearest row");
    }
}
