//! The full-screen dashboard: redraws the latest snapshot every interval
//! until q, Esc or Ctrl-C. The terminal is restored on every way out: the
//! guard's drop on return and on `?`, and ratatui's panic hook (installed by
//! `ratatui::init`) on a panic.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use srap_host::status::{Status, request_status};

use super::view::{Screen, draw};

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

pub fn run(control: &Path, first: Status, interval: Duration) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init().context("taking over the terminal")?;
    let _restore = Restore;
    let mut status = first;
    let mut error: Option<String> = None;
    let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    loop {
        terminal
            .draw(|frame| {
                draw(
                    frame,
                    &Screen {
                        status: &status,
                        error: error.as_deref(),
                        control,
                        interval_ms,
                    },
                );
            })
            .context("drawing")?;
        let next = Instant::now() + interval;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if !event::poll(left).context("reading the terminal")? {
                break;
            }
            match event::read().context("reading the terminal")? {
                Event::Key(key) if key.kind != KeyEventKind::Release => {
                    let ctrl_c = key.code == KeyCode::Char('c')
                        && key.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(());
                    }
                }
                // Redraw at once at the new size.
                Event::Resize(..) => break,
                _ => {}
            }
        }
        match request_status(control) {
            Ok((fresh, _)) => {
                status = fresh;
                error = None;
            }
            Err(err) => error = Some(err.to_string()),
        }
    }
}
