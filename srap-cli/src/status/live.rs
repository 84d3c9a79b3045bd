//! The live views' shared machinery: a thread that asks the agent every
//! interval ([`Feed`]), the terminal loop (keys, `?` help, quit), and the
//! stale banner — when the agent stops answering, the top lines say so
//! within one refresh (since when, why, what to check), the old data below
//! is dimmed, and everything recovers by itself when the agent answers
//! again. The terminal is restored on every way out: the guard's drop on
//! return and on `?`, ratatui's panic hook (installed by `ratatui::init`) on
//! a panic.

use std::{
    path::{Path, PathBuf},
    sync::mpsc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use ratatui::{
    Frame,
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};
use srap_host::report::Chain;
use srap_status::ControlError;

use super::columns::{cut, width};

/// One live view: what it asks the agent and how it draws the answer.
pub trait Page {
    type Snapshot: Send + 'static;
    /// The agent it watches, for the stale banner (`the receiver agent`).
    const AGENT: &'static str;
    /// Asks the agent at `path` (blocking): the snapshot and the JSON line
    /// it came as.
    fn fetch_line(path: &Path) -> Result<(Self::Snapshot, String), ControlError>;
    /// When the agent took the snapshot and how often it samples, if the
    /// snapshot says: an agent that answers with an old sample is stale too.
    fn sampled(_snapshot: &Self::Snapshot) -> Option<(SystemTime, Duration)> {
        None
    }
    /// Draws the snapshot into `area` (the whole screen but the banner and
    /// the footer).
    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, snapshot: &Self::Snapshot);
    /// Sees every good answer as it arrives (rates need the one before).
    fn update(&mut self, _snapshot: &Self::Snapshot) {}
    /// A key the loop does not handle itself.
    fn key(&mut self, code: KeyCode, snapshot: &Self::Snapshot);
    /// (key, what it does), for `?` and the footer; the first few show in
    /// the footer.
    fn keys(&self) -> Vec<(&'static str, &'static str)>;
    /// What the columns and marks mean, for `?`.
    fn legend(&self) -> Vec<String>;
}

/// The latest answer and how fresh it is.
#[derive(Debug)]
pub struct Feed<T> {
    pub latest: T,
    interval: Duration,
    last_ok: Instant,
    last_ok_wall: SystemTime,
    failure: Option<Failure>,
}

#[derive(Debug, Clone)]
struct Failure {
    since_wall: SystemTime,
    reason: String,
}

/// Why the data shown is old, as the banner says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// Local time of the last good data (`14:02:11`).
    pub since: String,
    pub seconds: u64,
    pub reason: String,
}

impl<T> Feed<T> {
    pub fn new(first: T, interval: Duration) -> Self {
        Self {
            latest: first,
            interval,
            last_ok: Instant::now(),
            last_ok_wall: SystemTime::now(),
            failure: None,
        }
    }

    /// Takes one answer of the agent (the error said as text).
    pub fn update(&mut self, answer: Result<T, String>) {
        match answer {
            Ok(fresh) => {
                self.latest = fresh;
                self.last_ok = Instant::now();
                self.last_ok_wall = SystemTime::now();
                self.failure = None;
            }
            Err(reason) => {
                self.failure = Some(Failure {
                    since_wall: self.last_ok_wall,
                    reason,
                });
            }
        }
    }

    /// Whether (and why) the data is stale: the last request failed, no
    /// answer came for two intervals, or the answer is an old sample.
    pub fn stale(&self, sampled: Option<(SystemTime, Duration)>) -> Option<Stale> {
        let now = SystemTime::now();
        let age = |t: SystemTime| now.duration_since(t).unwrap_or_default().as_secs();
        if let Some(failure) = &self.failure {
            return Some(Stale {
                since: clock(failure.since_wall),
                seconds: age(failure.since_wall),
                reason: failure.reason.clone(),
            });
        }
        let waited = self.last_ok.elapsed();
        if waited > self.interval * 2 + Duration::from_secs(1) {
            return Some(Stale {
                since: clock(self.last_ok_wall),
                seconds: waited.as_secs(),
                reason: "the agent accepts but does not answer (stopped, or stuck)".into(),
            });
        }
        let (taken, every) = sampled?;
        let old = now.duration_since(taken).unwrap_or_default();
        (old > every * 3 + Duration::from_secs(2)).then(|| Stale {
            since: clock(taken),
            seconds: old.as_secs(),
            reason: "the agent answers, but its last sample is old: its observer loop is stuck"
                .into(),
        })
    }
}

/// `HH:MM:SS` in local time.
fn clock(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = libc::time_t::try_from(secs).unwrap_or(0);
    // SAFETY: `tm` is plain old data that localtime_r fills in; both
    // pointers are valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&raw const t, &raw mut tm);
        tm
    };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// What the loop shows besides the page.
pub struct Chrome<'a> {
    pub control: &'a Path,
    pub interval: Duration,
    pub help: bool,
}

/// Runs `page` full-screen on the answers of the agent at `control`
/// (`first` is its first, taken before the terminal was), until q, Esc or
/// Ctrl-C.
pub fn run<P: Page>(
    page: &mut P,
    control: &Path,
    first: P::Snapshot,
    interval: Duration,
) -> anyhow::Result<()> {
    let answers = spawn_feed::<P>(control.to_owned(), interval);
    page.update(&first);
    let mut feed = Feed::new(first, interval);
    let mut terminal = ratatui::try_init().context("taking over the terminal")?;
    let _restore = Restore;
    let mut help = false;
    loop {
        while let Ok(answer) = answers.try_recv() {
            if let Ok(snapshot) = &answer {
                page.update(snapshot);
            }
            feed.update(answer);
        }
        let chrome = Chrome {
            control,
            interval,
            help,
        };
        terminal
            .draw(|frame| draw(frame, page, &feed, &chrome))
            .context("drawing")?;
        // Short waits: an answer or a key shows within a quarter second.
        if !event::poll(Duration::from_millis(250)).context("reading the terminal")? {
            continue;
        }
        match event::read().context("reading the terminal")? {
            Event::Key(key) if key.kind != KeyEventKind::Release => {
                let ctrl_c =
                    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
                match key.code {
                    _ if ctrl_c => return Ok(()),
                    // Any key closes the help first.
                    _ if help => help = false,
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('?') | KeyCode::F(1) | KeyCode::Char('h') => help = true,
                    code => page.key(code, &feed.latest),
                }
            }
            _ => {}
        }
    }
}

/// Asks the agent every `interval` on a thread of its own, so a slow agent
/// never freezes the keys; stops when the receiver is dropped.
fn spawn_feed<P: Page>(
    control: PathBuf,
    interval: Duration,
) -> mpsc::Receiver<Result<P::Snapshot, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(interval);
            let answer = P::fetch_line(&control)
                .map(|(snapshot, _)| snapshot)
                .map_err(|err| Chain(&err).to_string());
            if tx.send(answer).is_err() {
                return;
            }
        }
    });
    rx
}

/// The whole screen: the stale banner (if any), the page, the footer, the
/// help (if open).
pub fn draw<P: Page>(
    frame: &mut Frame<'_>,
    page: &mut P,
    feed: &Feed<P::Snapshot>,
    chrome: &Chrome<'_>,
) {
    let area = frame.area();
    let stale = feed.stale(P::sampled(&feed.latest));
    let banner = stale
        .as_ref()
        .map(|s| banner_lines(s, P::AGENT, usize::from(area.width)))
        .unwrap_or_default();
    let banner_height = (banner.len() as u16).min(area.height);
    let body = Rect {
        y: area.y + banner_height,
        height: area.height.saturating_sub(banner_height + 1),
        ..area
    };
    let footer = Rect {
        y: area.bottom().saturating_sub(1),
        height: 1,
        ..area
    };
    page.draw(frame, body, &feed.latest);
    if stale.is_some() {
        frame
            .buffer_mut()
            .set_style(body, Style::new().add_modifier(Modifier::DIM));
        let style = Style::new()
            .fg(Color::White)
            .bg(Color::Red)
            .add_modifier(Modifier::BOLD);
        let top = Rect {
            height: banner_height,
            ..area
        };
        frame.render_widget(Paragraph::new(banner).style(style), top);
    }
    frame.render_widget(footer_line(page, chrome, usize::from(area.width)), footer);
    if chrome.help {
        draw_help(frame, page, area);
    }
}

/// The banner, word-wrapped to `width`: what happened, since when, why and
/// what to do, and that the screen recovers by itself.
fn banner_lines(stale: &Stale, agent: &str, width: usize) -> Vec<Line<'static>> {
    let text = format!(
        "STALE: no fresh data from the {agent} for {} s (since {}); the figures below are \
         from then (dimmed). Why: {}. This screen recovers by itself when the agent answers.",
        stale.seconds, stale.since, stale.reason
    );
    wrap(&text, width)
        .into_iter()
        .map(|l| Line::from(format!("{l:<width$}")))
        .collect()
}

/// `text` word-wrapped into lines of at most `width` cells (a word longer
/// than a line, a path say, is split across lines rather than cut).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        let need = width_of(&line) + usize::from(!line.is_empty()) + word.len();
        if need > width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        while word.len() > width {
            let rest = word.split_off(width);
            lines.push(word.iter().collect());
            word = rest;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.extend(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn width_of(text: &str) -> usize {
    width(text)
}

/// Pieces (each a few spans that belong together: `3 flows`) joined by ` · `
/// into at most `max_lines` lines of `width` cells; a piece is never split,
/// and the pieces that do not fit are left out (the first ones matter most).
pub fn pack(pieces: Vec<Vec<Span<'static>>>, width: usize, max_lines: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Vec<Span<'static>>> = Vec::new();
    let mut used = 0;
    for piece in pieces {
        let size: usize = piece.iter().map(|s| width_of(&s.content)).sum();
        let fits_here = !lines.is_empty() && used + 3 + size <= width;
        if fits_here {
            let line = lines.last_mut().expect("not empty");
            line.push(Span::styled(" · ", Style::new().fg(Color::DarkGray)));
            line.extend(piece);
            used += 3 + size;
        } else if lines.len() < max_lines && size <= width {
            lines.push(piece);
            used = size;
        }
    }
    lines.into_iter().map(Line::from).collect()
}

/// `? help · q quit · …` and where the data comes from, as much as fits.
fn footer_line<P: Page>(page: &P, chrome: &Chrome<'_>, width: usize) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    let keys = [("?", "help"), ("q", "quit")]
        .into_iter()
        .chain(page.keys().into_iter().take(6));
    for (key, what) in keys {
        let piece = format!(" {key} {what} ");
        if used + width_of(&piece) + 1 > width {
            break;
        }
        used += width_of(&piece) + 1;
        spans.push(Span::styled(
            key.to_owned(),
            Style::new().add_modifier(Modifier::REVERSED),
        ));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    let source = format!(
        "every {} ms · {}",
        chrome.interval.as_millis(),
        chrome.control.display()
    );
    let room = width.saturating_sub(used + 1);
    if room >= 12 {
        spans.push(Span::styled(
            format!("{:>room$}", cut(&source, room)),
            Style::new().fg(Color::DarkGray),
        ));
    }
    Line::from(spans)
}

/// The keys and the legend in a box over the middle of the screen.
fn draw_help<P: Page>(frame: &mut Frame<'_>, page: &P, area: Rect) {
    let inner_width = usize::from(area.width.saturating_sub(4)).min(76);
    let mut lines: Vec<Line<'static>> = Vec::new();
    let keys = [
        ("q Esc", "quit"),
        ("? h F1", "this help (any key closes it)"),
    ]
    .into_iter()
    .chain(page.keys());
    for (key, what) in keys {
        lines.push(Line::from(vec![
            Span::styled(
                format!("{key:>12}"),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("  {what}")),
        ]));
    }
    lines.push(Line::raw(""));
    for paragraph in page.legend() {
        lines.extend(wrap(&paragraph, inner_width).into_iter().map(Line::from));
    }
    let height = (lines.len() as u16 + 2).min(area.height);
    let width = (inner_width as u16 + 2).min(area.width);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" keys and columns ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_answer_is_stale_until_a_good_one() {
        let mut feed = Feed::new(1, Duration::from_secs(1));
        assert_eq!(feed.stale(None), None);
        feed.update(Err("nothing answers on /x.sock".into()));
        let stale = feed.stale(None).expect("stale");
        assert_eq!(stale.reason, "nothing answers on /x.sock");
        assert_eq!(feed.latest, 1, "the old data stays");
        feed.update(Ok(2));
        assert_eq!(feed.stale(None), None, "recovers by itself");
        assert_eq!(feed.latest, 2);
        // An answer whose sample is a minute old.
        let old = SystemTime::now() - Duration::from_secs(60);
        let stale = feed
            .stale(Some((old, Duration::from_secs(1))))
            .expect("old sample");
        assert!(
            stale.seconds >= 60 && stale.reason.contains("old"),
            "{stale:?}"
        );
    }

    #[test]
    fn wrapping_keeps_words_whole_and_splits_only_longer_ones() {
        let lines = wrap("no answer on /tmp/srap-lab-s1x2/receiver.sock: refused", 20);
        assert_eq!(
            lines,
            [
                "no answer on",
                "/tmp/srap-lab-s1x2/r",
                "eceiver.sock:",
                "refused"
            ]
        );
        assert!(wrap("a b c", 80) == ["a b c"]);
    }
}
