//! Plots of `--experiment throughput` (`--plot DIR`), as PNG and SVG: each
//! flow's rate over time in one kernel-port trial and one SRAP trial (the
//! paper's Figures 1 and 3), and every trial's aggregate for both modes;
//! and of `--bond` ([`write_bond`]): every trial's aggregate over the
//! capped members, each kernel trial marked with its split; and of
//! `--experiment numa-nics` ([`write_numa`]): the bytes through the far
//! node's NIC per trial, the kernel's choice beside SRAP's; and of
//! `--experiment mptcp` ([`write_mptcp`]): every trial's aggregate over
//! the two links, each kernel trial marked with the queues it used.
//!
//! Text is drawn with `ab_glyph` from a TTF read at run time (DejaVu Sans,
//! Debian's `fonts-dejavu-core`), so nothing needs fontconfig or freetype.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use plotters::{
    coord::Shift,
    prelude::*,
    style::{FontStyle, register_font},
};

use srap_harness::guest::bond_lab::Ports;

use srap_harness::{guest::numa_lab::Choice, readers::Transfer};

use crate::{
    bond_throughput::{BondThroughputReport, split_text},
    mptcp_throughput::MptcpReport,
    numa_nics::{NumaNicsReport, NumaRound},
    receiver_nics::ReceiverNicsReport,
    throughput::{ModeReport, Spread, ThroughputReport, TrialResult},
};

/// Why a plot was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(
        "no TTF font for the plots (looked for {0}): install Debian's fonts-dejavu-core \
         (`cargo xtask setup` does) or set SRAP_PLOT_FONT to a .ttf file"
    )]
    NoFont(String),
    #[error("{0} is not a usable TrueType font")]
    BadFont(String),
    #[error("creating {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("drawing {0}: {1}")]
    Draw(PathBuf, String),
    #[error("the plots draw the queues' rate and the ideal: run with a --queue-rate")]
    NoCapacity,
}

/// Where the font is looked for, after `$SRAP_PLOT_FONT`.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1000, 560);
const ALONE: RGBColor = RGBColor(31, 119, 180);
const SHARED: RGBColor = RGBColor(214, 39, 40);
const MUTED: RGBColor = RGBColor(110, 110, 110);
const LIGHT: RGBColor = RGBColor(238, 238, 238);

/// Writes `flows-srap`, `flows-kernel` and `aggregate`, each `.png` and
/// `.svg`, into `dir` (made if missing); returns the files written.
pub fn write_all(report: &ThroughputReport, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let (Some(rate), Some(ideal)) = (report.queue_rate_gbps, report.ideal_gbps) else {
        return Err(PlotError::NoCapacity);
    };
    load_font()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let mut written = Vec::new();
    for (name, mode, label) in [
        ("flows-kernel", &report.kernel, "Kernel-chosen ports"),
        ("flows-srap", &report.srap, "SRAP ports"),
    ] {
        let Some((index, trial)) = mode.median_trial() else {
            continue;
        };
        let title = format!(
            "{label}, trial {} of {} (median): {} flows on {} queues, {:.2} Gbit/s",
            index + 1,
            mode.trials,
            trial.flows.len(),
            trial
                .queues_used
                .map_or_else(|| "?".to_owned(), |q| q.to_string()),
            trial.aggregate_gbps
        );
        let draw = |root: &Canvas<'_>| flows_chart(root, trial, rate, &title);
        written.extend(both_formats(dir, name, draw)?);
    }
    let draw = |root: &Canvas<'_>| aggregate_chart(root, report, rate, ideal);
    written.extend(both_formats(dir, "aggregate", draw)?);
    Ok(written)
}

/// Writes `dir/NAME.png` and `.svg`: every trial's aggregate of a `--bond`
/// run, kernel and SRAP ports, with the ideal (every member at its cap) and
/// the split of each kernel trial beside its point; returns the files.
pub fn write_bond(
    report: &BondThroughputReport,
    dir: &Path,
    name: &str,
) -> Result<Vec<PathBuf>, PlotError> {
    load_font()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let draw = |canvas: &Canvas<'_>| match canvas {
        Canvas::Png(root) => draw_bond(root, report),
        Canvas::Svg(root) => draw_bond(root, report),
    };
    both_formats(dir, name, draw)
}

/// Writes `dir/numa-far-nic.png` and `.svg`: per trial of `--experiment
/// numa-nics`, the MB that went through the far node's NIC, the kernel's
/// choice beside SRAP's, a panel per direction, with each kernel round's
/// share of the NICs' bytes; returns the files.
pub fn write_numa(report: &NumaNicsReport, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    load_font()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let draw = |canvas: &Canvas<'_>| match canvas {
        Canvas::Png(root) => draw_numa(root, report),
        Canvas::Svg(root) => draw_numa(root, report),
    };
    both_formats(dir, "numa-far-nic", draw)
}

/// Writes `dir/receiver-nics-aggregate.png` and `.svg`: every trial's
/// aggregate of `--experiment receiver-nics`, the kernel's ports and SRAP's,
/// with one NIC's cap and both NICs' beside them; returns the files.
pub fn write_receiver_nics(
    report: &ReceiverNicsReport,
    dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    load_font()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let draw = |canvas: &Canvas<'_>| match canvas {
        Canvas::Png(root) => draw_receiver_nics(root, report),
        Canvas::Svg(root) => draw_receiver_nics(root, report),
    };
    both_formats(dir, "receiver-nics-aggregate", draw)
}

/// Writes `mptcp-aggregate` (`.png` and `.svg`) into `dir`: every trial's
/// aggregate with the kernel's subflow ports and with SRAP's, against the
/// ideal.
pub fn write_mptcp(report: &MptcpReport, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    load_font()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let draw = |canvas: &Canvas<'_>| match canvas {
        Canvas::Png(root) => draw_mptcp(root, report),
        Canvas::Svg(root) => draw_mptcp(root, report),
    };
    both_formats(dir, "mptcp-aggregate", draw)
}

/// Either backend's drawing area.
enum Canvas<'a> {
    Png(DrawingArea<BitMapBackend<'a>, Shift>),
    Svg(DrawingArea<SVGBackend<'a>, Shift>),
}

/// Runs `draw` on a PNG and on an SVG canvas of `dir/name`.
fn both_formats(
    dir: &Path,
    name: &str,
    draw: impl Fn(&Canvas<'_>) -> Result<(), String>,
) -> Result<Vec<PathBuf>, PlotError> {
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |e: String| PlotError::Draw(path, e)
    };
    {
        let canvas = Canvas::Png(BitMapBackend::new(&png, SIZE).into_drawing_area());
        draw(&canvas).map_err(fail(&png))?;
        canvas.present().map_err(fail(&png))?;
    }
    {
        let canvas = Canvas::Svg(SVGBackend::new(&svg, SIZE).into_drawing_area());
        draw(&canvas).map_err(fail(&svg))?;
        canvas.present().map_err(fail(&svg))?;
    }
    Ok(vec![png, svg])
}

impl Canvas<'_> {
    /// Writes the file (a bitmap is only encoded here).
    fn present(&self) -> Result<(), String> {
        match self {
            Canvas::Png(area) => area.present().map_err(|e| e.to_string()),
            Canvas::Svg(area) => area.present().map_err(|e| e.to_string()),
        }
    }
}

/// Loads the TTF once: plotters keeps a `'static` reference to it.
fn load_font() -> Result<(), PlotError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    let outcome = LOADED.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = std::env::var_os("SRAP_PLOT_FONT")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        candidates.extend(FONTS.iter().map(PathBuf::from));
        let Some((path, bytes)) = candidates
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (p, b)))
        else {
            return Err(String::new());
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font(FAMILY, FontStyle::Normal, bytes).map_err(|_| path.display().to_string())
    });
    match outcome {
        Ok(()) => Ok(()),
        Err(path) if path.is_empty() => Err(PlotError::NoFont(FONTS.join(", "))),
        Err(path) => Err(PlotError::BadFont(path.clone())),
    }
}

fn flows_chart(
    canvas: &Canvas<'_>,
    trial: &TrialResult,
    queue_rate_gbps: f64,
    title: &str,
) -> Result<(), String> {
    match canvas {
        Canvas::Png(root) => draw_flows(root, trial, queue_rate_gbps, title),
        Canvas::Svg(root) => draw_flows(root, trial, queue_rate_gbps, title),
    }
}

fn aggregate_chart(
    canvas: &Canvas<'_>,
    report: &ThroughputReport,
    queue_rate_gbps: f64,
    ideal_gbps: f64,
) -> Result<(), String> {
    match canvas {
        Canvas::Png(root) => draw_aggregate(root, report, queue_rate_gbps, ideal_gbps),
        Canvas::Svg(root) => draw_aggregate(root, report, queue_rate_gbps, ideal_gbps),
    }
}

/// Each flow's Mbit/s per second of the trial: flows alone on their queue
/// in blue, flows sharing one in red, the queue rate dashed.
fn draw_flows<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    trial: &TrialResult,
    queue_rate_gbps: f64,
    title: &str,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let rate = queue_rate_gbps * 1e3;
    let points = trial.flows.iter().flat_map(|f| &f.series);
    let x_max = points.clone().map(|p| p.1).fold(1.0, f64::max);
    let y_max = points.map(|p| p.2 * 1e3).fold(rate, f64::max) * 1.12;
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("Mbit/s at the receiver")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(LIGHT)
        .label_style((FAMILY, 14))
        .draw()
        .map_err(err)?;
    let sharing = |queue: Option<u32>| {
        queue.is_some_and(|q| trial.flows.iter().filter(|f| f.queue == Some(q)).count() > 1)
    };
    let mut labelled = [false; 2];
    for flow in &trial.flows {
        let shared = sharing(flow.queue);
        let color = if shared { SHARED } else { ALONE };
        // Steps: each interval's rate over the interval it covers.
        let line = flow
            .series
            .iter()
            .flat_map(|&(start, end, g)| [(start, g * 1e3), (end, g * 1e3)]);
        let series = chart
            .draw_series(LineSeries::new(line, color.mix(0.85).stroke_width(2)))
            .map_err(err)?;
        if !std::mem::replace(&mut labelled[usize::from(shared)], true) {
            let count = trial
                .flows
                .iter()
                .filter(|f| sharing(f.queue) == shared)
                .count();
            let what = if shared {
                "sharing a queue"
            } else {
                "alone on their queue"
            };
            series
                .label(format!("{count} flows {what}"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, rate), (x_max, rate)],
            8,
            6,
            MUTED.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!("queue rate, {rate:.0} Mbit/s"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MUTED.stroke_width(1)));
    legend(&mut chart).map_err(err)
}

/// Every trial's aggregate Gbit/s, SRAP and kernel ports, with the ideal.
fn draw_aggregate<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &ThroughputReport,
    queue_rate_gbps: f64,
    ideal_gbps: f64,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let trials = report.srap.trials.max(report.kernel.trials) as f64;
    let top = [ideal_gbps, report.srap.max, report.kernel.max]
        .into_iter()
        .fold(0.0, f64::max)
        * 1.15;
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "Aggregate per trial: {} flows, {} queues of {:.0} Mbit/s",
        report.flows,
        report.queues,
        queue_rate_gbps * 1e3
    );
    let mut chart = trial_chart(root, title, trials, top, "Gbit/s at the receiver", None)?;
    for (ideal, name) in [(1.0, "ideal"), (0.95, "95 % of ideal")] {
        let y = ideal_gbps * ideal;
        let (dash, gap) = if ideal == 1.0 { (8, 6) } else { (3, 5) };
        chart
            .draw_series(DashedLineSeries::new(
                [(0.5, y), (trials + 0.5, y)],
                dash,
                gap,
                MUTED.stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("{name}, {y:.2} Gbit/s"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], MUTED.stroke_width(1)));
    }
    mode_points(&mut chart, &report.srap, "SRAP ports", ALONE, -0.08).map_err(err)?;
    mode_points(&mut chart, &report.kernel, "kernel ports", SHARED, 0.08).map_err(err)?;
    legend(&mut chart).map_err(err)
}

/// The `--bond` aggregate chart: Mbit/s per trial, both kinds of port.
/// An aggregate-per-trial chart: trials 1 to `trials` across, 0 to `top`
/// up, its mesh drawn; the y labels with `y_decimals` decimals, or
/// plotters' own.
fn trial_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: String,
    trials: f64,
    top: f64,
    y_desc: &str,
    y_decimals: Option<usize>,
) -> Result<
    ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(0.5f64..trials + 0.5, 0f64..top)
        .map_err(err)?;
    let y_label = |y: &f64| match y_decimals {
        Some(decimals) => format!("{y:.decimals$}"),
        None => format!("{y}"),
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc("trial")
        .y_desc(y_desc)
        .x_labels((trials as usize).clamp(2, 20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .light_line_style(LIGHT)
        .label_style((FAMILY, 14));
    if y_decimals.is_some() {
        mesh.y_label_formatter(&y_label);
    }
    mesh.draw().map_err(err)?;
    Ok(chart)
}

fn draw_bond<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &BondThroughputReport,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let kernel = report.of(Ports::Kernel);
    let srap = report.of(Ports::Steered);
    let trials = kernel.len().max(srap.len()).max(1) as f64;
    let ideal = report.ideal_mbps;
    let top = report
        .trials
        .iter()
        .map(|t| t.aggregate_mbps)
        .fold(ideal, f64::max)
        * 1.15;
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "Aggregate per trial: {} flows over {} members ({}) of {:.0} Mbit/s",
        report.flows, report.members, report.mode, report.member_rate_mbps
    );
    let mut chart = trial_chart(root, title, trials, top, "Mbit/s at the receiver", Some(0))?;
    chart
        .draw_series(DashedLineSeries::new(
            [(0.5, ideal), (trials + 0.5, ideal)],
            8,
            6,
            MUTED.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!(
            "ideal, {} x {:.0} = {ideal:.0} Mbit/s",
            report.members, report.member_rate_mbps
        ))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MUTED.stroke_width(1)));
    for (trials, name, color, shift) in [
        (&srap, "SRAP ports", ALONE, -0.08),
        (&kernel, "kernel ports", SHARED, 0.08),
    ] {
        let points: Vec<(f64, f64)> = trials
            .iter()
            .map(|t| (t.trial as f64 + shift, t.aggregate_mbps))
            .collect();
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        let median = Spread::of(&values).map_or(0.0, |s| s.median);
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(err)?
            .label(format!("{name} (median {median:.1})"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    }
    // Each kernel trial's split by the members' counters, below its point.
    let style = TextStyle::from((FAMILY, 12).into_font()).color(&SHARED);
    chart
        .draw_series(kernel.iter().map(|t| {
            Text::new(
                split_text(&t.by_counters),
                (t.trial as f64 - 0.15, t.aggregate_mbps - top * 0.03),
                style.clone(),
            )
        }))
        .map_err(err)?;
    legend(&mut chart).map_err(err)
}

fn draw_receiver_nics<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &ReceiverNicsReport,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let trials = report.trials.len().max(1) as f64;
    let cap = report.nic_rate_mbps;
    let top = report
        .trials
        .iter()
        .map(|t| t.srap.aggregate_mbps.max(t.kernel.aggregate_mbps))
        .fold(2.0 * cap, f64::max)
        * 1.15;
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "Aggregate per trial: {} streams to one address of a receiver with 2 NICs of {cap:.0} Mbit/s",
        report.streams
    );
    let mut chart = trial_chart(root, title, trials, top, "Mbit/s at the receiver", Some(0))?;
    for (level, name) in [(cap, "one NIC's cap"), (2.0 * cap, "both NICs' caps")] {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.5, level), (trials + 0.5, level)],
                8,
                6,
                MUTED.stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("{name}, {level:.0} Mbit/s"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MUTED.stroke_width(1)));
    }
    let srap: Vec<(usize, f64)> = report
        .trials
        .iter()
        .map(|t| (t.trial, t.srap.aggregate_mbps))
        .collect();
    let kernel: Vec<(usize, f64)> = report
        .trials
        .iter()
        .map(|t| (t.trial, t.kernel.aggregate_mbps))
        .collect();
    for (rates, name, color, shift) in [
        (&srap, "SRAP --receiver-nics spread", ALONE, -0.08),
        (&kernel, "kernel ports", SHARED, 0.08),
    ] {
        let points: Vec<(f64, f64)> = rates
            .iter()
            .map(|&(t, rate)| (t as f64 + shift, rate))
            .collect();
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        let median = Spread::of(&values).map_or(0.0, |s| s.median);
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(err)?
            .label(format!("{name} (median {median:.1})"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    }
    legend(&mut chart).map_err(err)
}

fn draw_mptcp<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &MptcpReport,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let trials = report.trials.len().max(1) as f64;
    let ideal = report.ideal_mbps;
    let top = report
        .trials
        .iter()
        .map(|t| t.srap.aggregate_mbps.max(t.kernel.aggregate_mbps))
        .fold(ideal, f64::max)
        * 1.15;
    root.fill(&WHITE).map_err(err)?;
    let title = format!(
        "Aggregate per trial: {} MPTCP connections x 2 links, {} queues of {:.0} Mbit/s each",
        report.connections, report.queues, report.queue_rate_mbps
    );
    let mut chart = trial_chart(root, title, trials, top, "Mbit/s at the receiver", Some(0))?;
    chart
        .draw_series(DashedLineSeries::new(
            [(0.5, ideal), (trials + 0.5, ideal)],
            8,
            6,
            MUTED.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!(
            "ideal, {} subflows x {:.0} = {ideal:.0} Mbit/s",
            2 * report.connections,
            report.queue_rate_mbps
        ))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], MUTED.stroke_width(1)));
    let of = |srap: bool| -> Vec<(f64, f64, usize)> {
        report
            .trials
            .iter()
            .map(|t| {
                let run = if srap { &t.srap } else { &t.kernel };
                (t.trial as f64, run.aggregate_mbps, run.queues_used)
            })
            .collect()
    };
    let (srap, kernel) = (of(true), of(false));
    for (points, name, color, shift) in [
        (&srap, "SRAP ports", ALONE, -0.08),
        (&kernel, "kernel ports", SHARED, 0.08),
    ] {
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        let median = Spread::of(&values).map_or(0.0, |s| s.median);
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(t, y, _)| Circle::new((t + shift, y), 5, color.filled())),
            )
            .map_err(err)?
            .label(format!("{name} (median {median:.1})"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    }
    // Each kernel trial's distinct (link, queue) pairs, below its point.
    let style = TextStyle::from((FAMILY, 12).into_font()).color(&SHARED);
    let subflows = 2 * report.connections;
    chart
        .draw_series(kernel.iter().map(|&(t, y, used)| {
            Text::new(
                format!("{used}/{subflows} queues"),
                (t - 0.2, y - top * 0.03),
                style.clone(),
            )
        }))
        .map_err(err)?;
    legend(&mut chart).map_err(err)
}

/// One panel per direction the report ran (downloads by `rx_bytes`,
/// uploads by `tx_bytes`: their scales differ tenfold, the uploads being
/// unpaced).
fn draw_numa<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &NumaNicsReport,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let ways: Vec<Transfer> = [Transfer::Download, Transfer::Upload]
        .into_iter()
        .filter(|&t| !report.of(Choice::Kernel, t).is_empty())
        .collect();
    let panels = root.split_evenly((1, ways.len().max(1)));
    for (panel, transfer) in panels.iter().zip(ways) {
        numa_panel(panel, report, transfer)?;
    }
    Ok(())
}

/// MB through the far node's NIC per trial in one direction, the kernel's
/// choice and SRAP's, each kernel trial with its share of the NICs' bytes.
fn numa_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &NumaNicsReport,
    transfer: Transfer,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mb = |r: &NumaRound| r.far_nic_bytes as f64 / 1e6;
    let kernel = report.of(Choice::Kernel, transfer);
    let srap = report.of(Choice::Srap, transfer);
    let trials = kernel.len().max(srap.len()).max(1) as f64;
    // Room above the points for the legend.
    let top = kernel
        .iter()
        .chain(&srap)
        .map(|r| mb(r))
        .fold(1.0, f64::max)
        * 1.6;
    let (way, counter) = match transfer {
        Transfer::Download => ("Downloads", "rx_bytes"),
        Transfer::Upload => ("Uploads", "tx_bytes"),
    };
    let title = format!("{way}: far node's NIC ({counter})");
    let mut chart = trial_chart(
        area,
        title,
        trials,
        top,
        "MB through the far node's NIC",
        Some(0),
    )?;
    for (rounds, name, color, shift) in [
        (&kernel, "kernel's choice (the route)", SHARED, 0.08),
        (&srap, "SRAP --local-nics numa", ALONE, -0.08),
    ] {
        let total: f64 = rounds.iter().map(|r| mb(r)).sum();
        chart
            .draw_series(
                rounds
                    .iter()
                    .map(|r| Circle::new((r.trial as f64 + shift, mb(r)), 6, color.filled())),
            )
            .map_err(err)?
            .label(format!("{name}: {total:.0} MB in all"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 6, color.filled()));
    }
    // Each kernel trial's share of the NICs' bytes, above its point.
    let text = TextStyle::from((FAMILY, 13).into_font()).color(&SHARED);
    chart
        .draw_series(kernel.iter().map(|r| {
            Text::new(
                format!("{:.0}% of all", r.far_share() * 100.0),
                (r.trial as f64 - 0.1, mb(r) + top * 0.06),
                text.clone(),
            )
        }))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(MUTED)
        .draw()
        .map_err(err)
}

type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One mode's aggregates as markers, nudged sideways by `shift` so the two
/// modes do not hide each other.
fn mode_points<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    mode: &ModeReport,
    name: &str,
    color: RGBColor,
    shift: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let points = mode
        .aggregate_gbps
        .iter()
        .enumerate()
        .map(move |(i, &g)| Circle::new((i as f64 + 1.0 + shift, g), 5, color.filled()));
    chart
        .draw_series(points)?
        .label(format!("{name} (median {:.2})", mode.median))
        .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(MUTED)
        .draw()
}
