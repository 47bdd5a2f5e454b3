//! Draws the README's pictures from the CSV files the benchmark and the
//! chaos suite write (SVG, no fonts or system libraries needed).
//!
//! ```text
//! plot ratios      [--data DIR] [--out FILE]   # DIR/throughput.csv
//! plot leader-loss [--data DIR] [--out FILE]   # DIR/failover.csv
//! plot cut-off     [--data DIR] [--out FILE]   # DIR/cut-off-refuse.csv
//! plot chaos       [--data DIR] [--out FILE]   # DIR/chaos-timeline.csv
//! plot killed-bank [--data DIR] [--out FILE]   # DIR/killed-bank.csv
//! plot week        [--data DIR] [--out FILE]   # DIR/week-restart.csv, DIR/week-crash.csv
//! ```
//!
//! `DIR` defaults to `docs/img/data`, `FILE` to `docs/img/<picture>.svg`
//! (`benchmark-ratios.svg`, `leader-loss.svg`, `cut-off.svg`,
//! `chaos-timeline.svg`, `killed-bank.svg`), both
//! relative to the working directory. `perf/plot.sh` runs it from the
//! repository root. `throughput-run.csv` and `failover-run.csv` beside the
//! data, when present, label the benchmark pictures.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[path = "../stats.rs"]
mod stats;
#[path = "plot/week.rs"]
mod week;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use stats::median;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const USAGE: &str =
    "usage: plot ratios|leader-loss|cut-off|chaos|killed-bank|week [--data DIR] [--out FILE]";

const FONT: &str = "sans-serif";
const PLAN: RGBColor = RGBColor(31, 119, 180);
const BATCHED: RGBColor = RGBColor(23, 190, 207);
const UPSTREAM: RGBColor = RGBColor(230, 126, 34);
const GREY: RGBColor = RGBColor(120, 120, 120);
const FLOOR: RGBColor = RGBColor(60, 60, 60);
/// The bare BatchCommands stream per store (perf/src/floor.rs).
const FLOOR_NAME: &str = "BatchCommands floor";
const LIGHT: RGBColor = RGBColor(200, 200, 200);
const OK: RGBColor = RGBColor(90, 160, 90);
const UNDETERMINED: RGBColor = RGBColor(240, 160, 0);
const FAILED: RGBColor = RGBColor(200, 40, 40);

// ---------------------------------------------------------------------------
// CSV.

/// A CSV file: its header and rows, every field a string.
struct Csv {
    path: PathBuf,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// Splits CSV text into records: fields separated by commas, a field in
/// double quotes may hold commas, line breaks and doubled quotes.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    current.push('"');
                    chars.next();
                }
                '"' => quoted = false,
                other => current.push(other),
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => record.push(std::mem::take(&mut current)),
            '\r' => {}
            '\n' => {
                record.push(std::mem::take(&mut current));
                records.push(std::mem::take(&mut record));
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() || !record.is_empty() {
        record.push(current);
        records.push(record);
    }
    records
}

impl Csv {
    fn read(path: &Path) -> Result<Csv> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut records = parse_csv(&text).into_iter();
        let header = records
            .next()
            .ok_or_else(|| format!("{} is empty", path.display()))?;
        Ok(Csv {
            path: path.to_owned(),
            header,
            rows: records.collect(),
        })
    }

    /// The index of column `name`.
    fn column(&self, name: &str) -> Result<usize> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{} has no column {name}", self.path.display()).into())
    }

    /// Field `column` of every row, as text.
    fn texts(&self, name: &str) -> Result<Vec<String>> {
        let i = self.column(name)?;
        Ok(self
            .rows
            .iter()
            .map(|r| r.get(i).cloned().unwrap_or_default())
            .collect())
    }

    /// Field `column` of every row as a number; NaN where empty.
    fn numbers(&self, name: &str) -> Result<Vec<f64>> {
        let i = self.column(name)?;
        self.rows
            .iter()
            .enumerate()
            .map(|(n, r)| match r.get(i).map(String::as_str) {
                None | Some("") => Ok(f64::NAN),
                Some(t) => t.parse::<f64>().map_err(|_| {
                    format!(
                        "{} line {}: {name} is not a number: {t:?}",
                        self.path.display(),
                        n + 2
                    )
                    .into()
                }),
            })
            .collect()
    }
}

/// `FAMILY-run.csv`'s `key,value` pairs, or none when it is missing.
fn run_info(data: &Path, family: &str) -> BTreeMap<String, String> {
    match Csv::read(&data.join(format!("{family}-run.csv"))) {
        Ok(csv) => csv
            .rows
            .into_iter()
            .filter_map(|r| {
                let mut r = r.into_iter();
                Some((r.next()?, r.next().unwrap_or_default()))
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

// ---------------------------------------------------------------------------
// Small numeric helpers.

/// Nearest-rank percentile of the values (sorted here).
fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// A latency for a label: µs below a millisecond, ms below a second, s.
fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1e3)
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.1} s", ms / 1e3)
    }
}

fn text_style(size: u32, color: &RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(color)
}

fn anchored(size: u32, color: &RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    text_style(size, color).pos(Pos::new(h, v))
}

/// The client's colour in every picture.
fn client_color(client: &str) -> RGBColor {
    match client {
        "tikv-plan" | "tikv-plan unary" => PLAN,
        "tikv-plan batched" => BATCHED,
        FLOOR_NAME => FLOOR,
        c if c.starts_with("tikv-client") => UPSTREAM,
        _ => GREY,
    }
}

/// A white canvas of `size` at `out`, with a title and a footer line.
fn canvas<'a>(
    out: &'a Path,
    size: (u32, u32),
    title: &str,
    footer: &str,
) -> Result<DrawingArea<SVGBackend<'a>, Shift>> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(out, size).into_drawing_area();
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(size.1 - 22);
    foot.draw(&Text::new(
        footer.to_owned(),
        (12, 4),
        text_style(11, &GREY),
    ))?;
    Ok(body.titled(title, (FONT, 19))?)
}

// ---------------------------------------------------------------------------
// Benchmark ratios.

/// The operations in table order, with the names the CSV uses.
const OPS: [(&str, &str); 7] = [
    ("get", "get"),
    ("put", "put"),
    ("batch_get", "batch_get 100"),
    ("scan", "scan 100"),
    ("txn", "txn"),
    ("txn_pessimistic", "pess. txn"),
    ("snapshot_get", "snap. get"),
];

/// One bar group per operation and task count: the median over rounds of
/// each per-round ratio, per client.
struct RatioCell {
    label: String,
    /// Client to (ops/s ÷ bare, p99 ÷ bare, ops/s ÷ tikv-client, p99 ÷
    /// tikv-client, ops/s ÷ floor, client CPU per op ÷ floor).
    by_client: BTreeMap<String, [f64; 6]>,
}

fn ratio_cells(csv: &Csv) -> Result<Vec<RatioCell>> {
    let ops = csv.texts("op")?;
    let tasks = csv.numbers("tasks")?;
    let clients = csv.texts("client")?;
    // Files written before the floor was measured have no floor columns.
    let optional = |name: &str| {
        csv.numbers(name)
            .unwrap_or_else(|_| vec![f64::NAN; ops.len()])
    };
    let columns = [
        csv.numbers("ops_per_s_vs_bare")?,
        csv.numbers("p99_vs_bare")?,
        csv.numbers("ops_per_s_vs_tikv_client")?,
        csv.numbers("p99_vs_tikv_client")?,
        optional("ops_per_s_vs_floor"),
        optional("cpu_vs_floor"),
    ];
    let task_counts: BTreeSet<u64> = tasks.iter().map(|t| *t as u64).collect();
    let mut cells = Vec::new();
    for (op, op_label) in OPS {
        for &t in &task_counts {
            let rows: Vec<usize> = (0..ops.len())
                .filter(|&i| ops[i] == op && tasks[i] as u64 == t)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let mut by_client = BTreeMap::new();
            let names: BTreeSet<&String> = rows.iter().map(|&i| &clients[i]).collect();
            for name in names {
                let mine: Vec<usize> = rows
                    .iter()
                    .copied()
                    .filter(|&i| &clients[i] == name)
                    .collect();
                let med = |c: &Vec<f64>| median(&mine.iter().map(|&i| c[i]).collect::<Vec<_>>());
                by_client.insert(name.clone(), columns.each_ref().map(med));
            }
            cells.push(RatioCell {
                label: format!("{op_label} · {t}"),
                by_client,
            });
        }
    }
    Ok(cells)
}

/// One bar chart of ratios: groups along x, one bar per series, a line at 1.
fn ratio_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    y_desc: &str,
    labels: &[String],
    series: &[(String, RGBColor, Vec<f64>)],
    reference: &str,
) -> Result<()> {
    let top = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        // Room above the bars for the legend.
        * 1.55;
    let groups = labels.len();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15))
        .margin(8)
        .margin_right(16)
        .x_label_area_size(26)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5f64..groups as f64 - 0.5, 0f64..top)?;
    let label_of = |x: &f64| -> String {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups)
        .x_label_formatter(&label_of)
        .x_label_style((FONT, 12))
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y:.1}"))
        .y_desc(y_desc)
        .axis_desc_style((FONT, 13))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(235, 235, 235))
        .draw()?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(-0.5, 1.0), (groups as f64 - 0.5, 1.0)],
            BLACK.stroke_width(1),
        )))?
        .label(reference.to_owned())
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(1)));
    let width = 0.8 / series.len().max(1) as f64;
    for (s, (name, color, values)) in series.iter().enumerate() {
        let color = *color;
        let left = |g: usize| g as f64 - 0.4 + s as f64 * width;
        let bars = values.iter().enumerate().filter(|(_, v)| v.is_finite());
        chart
            .draw_series(bars.clone().map(|(g, v)| {
                Rectangle::new(
                    [(left(g) + 0.01, 0.0), (left(g) + width - 0.01, *v)],
                    color.filled(),
                )
            }))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(bars.map(|(g, v)| {
            Text::new(
                format!("{v:.2}"),
                (left(g) + width / 2.0, *v),
                anchored(11, &BLACK, HPos::Center, VPos::Bottom),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(LIGHT)
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

fn plot_ratios(data: &Path, out: &Path) -> Result<String> {
    let csv = Csv::read(&data.join("throughput.csv"))?;
    let info = run_info(data, "throughput");
    let cells = ratio_cells(&csv)?;
    if cells.is_empty() {
        return Err(format!("{} has no rows", csv.path.display()).into());
    }
    let labels: Vec<String> = cells.iter().map(|c| c.label.clone()).collect();
    let clients: BTreeSet<String> = cells
        .iter()
        .flat_map(|c| c.by_client.keys().cloned())
        .filter(|c| c != "bare tonic")
        .collect();
    // tikv-plan's default (batched) first, then its unary mode, then
    // tikv-client.
    let mut clients: Vec<String> = clients.into_iter().collect();
    clients.sort_by_key(|c| match c.as_str() {
        "tikv-plan batched" => 0,
        "tikv-plan" | "tikv-plan unary" => 1,
        _ => 2,
    });
    let plans: Vec<&String> = clients
        .iter()
        .filter(|c| c.starts_with("tikv-plan"))
        .collect();
    let column = |client: &str, i: usize| -> Vec<f64> {
        cells
            .iter()
            .map(|c| c.by_client.get(client).map_or(f64::NAN, |r| r[i]))
            .collect()
    };
    // Against the bare call: only the cells it ran (it has no
    // transactions).
    let with_bare: Vec<usize> = (0..cells.len())
        .filter(|&i| cells[i].by_client.values().any(|r| r[0].is_finite()))
        .collect();
    let bare_labels: Vec<String> = with_bare.iter().map(|&i| labels[i].clone()).collect();
    let versus_bare: Vec<(String, RGBColor, Vec<f64>)> = clients
        .iter()
        .map(|c| {
            let all = column(c, 0);
            (
                c.clone(),
                client_color(c),
                with_bare.iter().map(|&i| all[i]).collect(),
            )
        })
        .collect();
    // Each tikv-plan transport's throughput and client CPU per op over the
    // floor's, in the cells the floor ran.
    let with_floor: Vec<usize> = (0..cells.len())
        .filter(|&i| cells[i].by_client.values().any(|r| r[4].is_finite()))
        .collect();
    let floor_labels: Vec<String> = with_floor.iter().map(|&i| labels[i].clone()).collect();
    let plan_vs_floor: Vec<(String, RGBColor, Vec<f64>)> = plans
        .iter()
        .flat_map(|c| {
            let ops = column(c, 4);
            let cpu = column(c, 5);
            let base = client_color(c);
            let lighter = RGBColor(base.0 / 2 + 127, base.1 / 2 + 127, base.2 / 2 + 127);
            [
                (
                    format!("{c}: ops/s"),
                    base,
                    with_floor.iter().map(|&i| ops[i]).collect(),
                ),
                (
                    format!("{c}: client CPU per op"),
                    lighter,
                    with_floor.iter().map(|&i| cpu[i]).collect(),
                ),
            ]
        })
        .collect();
    // Each tikv-plan transport's throughput over tikv-client's.
    let plan_vs_upstream: Vec<(String, RGBColor, Vec<f64>)> = plans
        .iter()
        .map(|c| {
            (
                format!("{c}: ops/s (above 1: more than tikv-client)"),
                client_color(c),
                column(c, 2),
            )
        })
        .collect();

    let footer = format!(
        "From {} ({}; {}; {} rounds of {} ms per client and cell). Each bar: the median of per-round ratios.",
        csv.path.display(),
        info.get("label").map_or("unlabelled run", String::as_str),
        info.get("machine").map_or("unknown machine", String::as_str),
        info.get("rounds").map_or("?", String::as_str),
        info.get("window_ms").map_or("?", String::as_str),
    );
    let root = canvas(
        out,
        (1500, if with_floor.is_empty() { 760 } else { 1130 }),
        "Side by side against one simulated cluster (3 stores, 8 Regions); after each operation, its task count",
        &footer,
    )?;
    let (upper, lower) = root.split_vertically(370);
    let lower = if with_floor.is_empty() {
        lower
    } else {
        let (middle, lower) = lower.split_vertically(370);
        ratio_panel(
            &middle,
            "tikv-plan relative to the BatchCommands floor (one bare stream per store, context by hand)",
            "÷ BatchCommands floor",
            &floor_labels,
            &plan_vs_floor,
            "floor = 1",
        )?;
        lower
    };
    ratio_panel(
        &upper,
        "Throughput relative to a bare tonic call (1 = as fast as one hand-routed gRPC call)",
        "ops/s ÷ bare tonic",
        &bare_labels,
        &versus_bare,
        "bare tonic = 1",
    )?;
    ratio_panel(
        &lower,
        "tikv-plan's throughput relative to tikv-client 0.4.0 (both transports)",
        "ops/s ÷ tikv-client",
        &labels,
        &plan_vs_upstream,
        "tikv-client 0.4.0 = 1",
    )?;
    root.present()?;

    let mut summary = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let get = |client: &str, k: usize| cell.by_client.get(client).map_or(f64::NAN, |r| r[k]);
        let mut line = format!(
            "{}: tikv-client ÷ bare {:.2}",
            labels[i],
            get("tikv-client 0.4.0", 0)
        );
        for plan in &plans {
            line.push_str(&format!(
                "; {plan} ÷ bare {:.2}, ÷ tikv-client ops/s {:.2} p99 {:.2}, ÷ floor ops/s {:.2} CPU {:.2}",
                get(plan, 0),
                get(plan, 2),
                get(plan, 3),
                get(plan, 4),
                get(plan, 5),
            ));
        }
        summary.push_str(&line);
        summary.push('\n');
    }
    Ok(summary)
}

// ---------------------------------------------------------------------------
// Leader loss.

struct Reads {
    client: Vec<String>,
    trial: Vec<String>,
    since: Vec<f64>,
    latency: Vec<f64>,
    outcome: Vec<String>,
    first_success: Vec<f64>,
}

/// Per client: the trials' times to first success (NaN: none by the cap).
fn first_successes(reads: &Reads) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for i in 0..reads.client.len() {
        out.entry(reads.client[i].clone())
            .or_default()
            .insert(reads.trial[i].clone(), reads.first_success[i]);
    }
    out
}

/// What one panel of the leader-loss picture shows.
struct ReadPanel {
    caption: String,
    /// Milliseconds since the fault.
    x: std::ops::Range<f64>,
    /// Label the x axis in seconds (else milliseconds).
    x_in_seconds: bool,
    /// Milliseconds of latency.
    y: std::ops::Range<f64>,
    legend: bool,
    /// The fault's label at its line.
    fault: &'static str,
}

/// One scatter panel: each read at its start (x, ms since the fault) and
/// latency (y, ms, log scale), a line from its start to its end; errors as
/// crosses. `firsts`: each client's first success.
fn read_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: ReadPanel,
    reads: &Reads,
    firsts: &[(String, f64)],
) -> Result<()> {
    let ReadPanel {
        caption,
        x,
        x_in_seconds,
        y,
        legend,
        fault,
    } = panel;
    let mut chart = ChartBuilder::on(area)
        .caption(&caption, (FONT, 15))
        .margin(8)
        .margin_right(18)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(x.clone(), y.clone().log_scale())?;
    let x_fmt = |v: &f64| {
        if x_in_seconds {
            format!("{:.0} s", v / 1e3)
        } else {
            format!("{v:.0}")
        }
    };
    chart
        .configure_mesh()
        .x_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| fmt_ms(*v))
        .x_desc(if x_in_seconds {
            "time since the fault"
        } else {
            "time since the fault (ms)"
        })
        .y_desc("latency of the read")
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(245, 245, 245))
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    // The fault.
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, y.start), (0.0, y.end)],
        BLACK.stroke_width(2),
    )))?;
    chart.draw_series(std::iter::once(Text::new(
        fault.to_owned(),
        (0.0, y.end),
        anchored(12, &BLACK, HPos::Left, VPos::Top),
    )))?;
    // Each client's first success (median over trials).
    for (client, at) in firsts.iter().filter(|(_, at)| at.is_finite()) {
        let color = client_color(client);
        if *at < x.end {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(*at, y.start), (*at, y.end)],
                color.mix(0.6).stroke_width(1),
            )))?;
        }
    }
    let clients: BTreeSet<&String> = reads.client.iter().collect();
    let mut order: Vec<&String> = clients.into_iter().collect();
    order.sort_by_key(|c| if c.starts_with("tikv-plan") { 0 } else { 1 });
    for client in order {
        let color = client_color(client);
        let mine: Vec<usize> = (0..reads.client.len())
            .filter(|&i| &reads.client[i] == client)
            .filter(|&i| reads.since[i] >= x.start && reads.since[i] <= x.end)
            .collect();
        let y_of = |i: usize| reads.latency[i].clamp(y.start, y.end);
        // Where each read's time went: a line from its start to its end.
        chart.draw_series(mine.iter().filter(|&&i| reads.latency[i] > 1.0).map(|&i| {
            PathElement::new(
                vec![
                    (reads.since[i], y_of(i)),
                    ((reads.since[i] + reads.latency[i]).min(x.end), y_of(i)),
                ],
                color.mix(0.5).stroke_width(2),
            )
        }))?;
        let oks = mine.iter().filter(|&&i| reads.outcome[i] == "ok");
        let series = chart.draw_series(
            oks.map(|&i| Circle::new((reads.since[i], y_of(i)), 3, color.mix(0.8).filled())),
        )?;
        if legend {
            series
                .label(format!("{client}: read answered"))
                .legend(move |(x, y)| Circle::new((x + 6, y), 4, color.filled()));
        }
        let failed = mine.iter().filter(|&&i| reads.outcome[i] != "ok");
        let series = chart.draw_series(
            failed.map(|&i| Cross::new((reads.since[i], y_of(i)), 5, color.stroke_width(2))),
        )?;
        if legend {
            series
                .label(format!("{client}: read failed (error or cap)"))
                .legend(move |(x, y)| Cross::new((x + 6, y), 5, color.stroke_width(2)));
        }
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(LIGHT)
            .label_font((FONT, 12))
            .draw()?;
    }
    Ok(())
}

fn plot_leader_loss(data: &Path, out: &Path) -> Result<String> {
    plot_reads(
        data,
        out,
        ReadsPicture {
            family: "failover",
            cap_key: "failover_cap_s",
            title: "Leader loss: store 1 goes down, its Regions' leaders moved to other voters, PD still naming store 1",
            fault: " store 1 down",
        },
    )
}

fn plot_cut_off(data: &Path, out: &Path) -> Result<String> {
    plot_reads(
        data,
        out,
        ReadsPicture {
            family: "cut-off-refuse",
            cap_key: "cut_off_cap_s",
            title: "Cut off: the client alone cannot reach store 1 (its connections reset), which keeps leading; the other stores reach it",
            fault: " store 1 cut off",
        },
    )
}

/// What a picture of timed reads around a fault shows.
struct ReadsPicture {
    /// The CSV family (`DATA/FAMILY.csv`, `DATA/FAMILY-run.csv`).
    family: &'static str,
    /// The run's cap, in the run file.
    cap_key: &'static str,
    title: &'static str,
    fault: &'static str,
}

fn plot_reads(data: &Path, out: &Path, picture: ReadsPicture) -> Result<String> {
    let csv = Csv::read(&data.join(format!("{}.csv", picture.family)))?;
    let info = run_info(data, picture.family);
    let reads = Reads {
        client: csv.texts("client")?,
        trial: csv.texts("trial")?,
        since: csv.numbers("since_fault_ms")?,
        latency: csv.numbers("latency_ms")?,
        outcome: csv.texts("outcome")?,
        first_success: csv.numbers("time_to_first_success_ms")?,
    };
    if reads.client.is_empty() {
        return Err(format!("{} has no rows", csv.path.display()).into());
    }
    let cap_ms = info
        .get(picture.cap_key)
        .and_then(|c| c.parse::<f64>().ok())
        .map(|s| s * 1e3);
    let mut by_client: Vec<(String, BTreeMap<String, f64>)> =
        first_successes(&reads).into_iter().collect();
    by_client.sort_by_key(|(c, _)| if c.starts_with("tikv-plan") { 0 } else { 1 });
    let mut firsts = Vec::new();
    let mut lines = Vec::new();
    for (client, trials) in &by_client {
        let values: Vec<f64> = trials.values().copied().collect();
        let finished = values.iter().filter(|v| v.is_finite()).count();
        // The upper median, an unfinished trial counting as the longest (as
        // the markdown table does).
        let mut sorted: Vec<f64> = values
            .iter()
            .map(|v| if v.is_finite() { *v } else { f64::INFINITY })
            .collect();
        sorted.sort_by(f64::total_cmp);
        let med = sorted[sorted.len() / 2];
        firsts.push((client.clone(), med));
        let each: Vec<String> = values
            .iter()
            .map(|v| {
                if v.is_finite() {
                    fmt_ms(*v)
                } else {
                    "none".to_owned()
                }
            })
            .collect();
        lines.push(if med.is_finite() {
            format!(
                "{client}: first success after {} (median of {} trials: {})",
                fmt_ms(med),
                values.len(),
                each.join(", ")
            )
        } else {
            format!(
                "{client}: no success within {} in {} of {} trials (each: {})",
                cap_ms.map_or("the cap".to_owned(), fmt_ms),
                values.len() - finished,
                values.len(),
                each.join(", ")
            )
        });
    }
    let finite = |v: &[f64]| -> Vec<f64> { v.iter().copied().filter(|x| x.is_finite()).collect() };
    let low = finite(&reads.latency)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    let high = finite(&reads.latency).into_iter().fold(0.0f64, f64::max);
    let y = (low * 0.7).clamp(0.001, 0.1)..(high * 1.6).max(10.0);
    let end = reads
        .since
        .iter()
        .zip(&reads.latency)
        .map(|(s, l)| s + l)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let end = cap_ms.unwrap_or(end).max(end) * 1.02;
    let start = finite(&reads.since).into_iter().fold(0.0f64, f64::min);

    let footer = format!(
        "From {} ({}; {}). Each mark is one read, at its start; a line runs to its end. Vertical lines: first success (median of trials).",
        csv.path.display(),
        info.get("label").map_or("unlabelled run", String::as_str),
        info.get("machine").map_or("unknown machine", String::as_str),
    );
    let root = canvas(out, (1100, 700), picture.title, &footer)?;
    let (text_area, plots) = root.split_vertically(24 + 18 * lines.len() as u32);
    for (i, line) in lines.iter().enumerate() {
        let color = client_color(line.split(':').next().unwrap_or(""));
        text_area.draw(&Text::new(
            line.clone(),
            (70, 6 + 18 * i as i32),
            text_style(14, &color),
        ))?;
    }
    let (left, right) = plots.split_horizontally(470);
    let zoom_end = firsts
        .iter()
        .filter(|(c, at)| c.starts_with("tikv-plan") && at.is_finite())
        .map(|(_, at)| *at)
        .fold(0.0f64, f64::max)
        + 600.0;
    let around = start.max(-250.0);
    read_panel(
        &left,
        ReadPanel {
            caption: format!("Around the fault: {around:.0} ms to +{zoom_end:.0} ms"),
            x: around..zoom_end,
            x_in_seconds: false,
            y: y.clone(),
            legend: false,
            fault: picture.fault,
        },
        &reads,
        &firsts,
    )?;
    read_panel(
        &right,
        ReadPanel {
            caption: "The whole trial".to_owned(),
            x: start..end,
            x_in_seconds: true,
            y,
            legend: true,
            fault: picture.fault,
        },
        &reads,
        &firsts,
    )?;
    root.present()?;
    Ok(lines.join("\n") + "\n")
}

// ---------------------------------------------------------------------------
// Killed mid-transaction.

/// One row of `killed-bank.csv`.
struct BankEvent {
    client: String,
    /// Seconds since the run's start, when the worker reported it.
    at: f64,
    event: String,
    /// Milliseconds the transfer took (audits: the longest of the line's).
    latency: f64,
    /// How many the line stands for (audits are counted per second).
    count: usize,
}

/// Two panels over the run's time: transfers committed so far, per client,
/// with the kills marked; and every transfer at its start, by latency.
fn plot_killed_bank(data: &Path, out: &Path) -> Result<String> {
    let csv = Csv::read(&data.join("killed-bank.csv"))?;
    let info = run_info(data, "killed-bank");
    let (clients, at, events, latency, counts) = (
        csv.texts("client")?,
        csv.numbers("at_ms")?,
        csv.texts("event")?,
        csv.numbers("latency_ms")?,
        csv.numbers("count")?,
    );
    let rows: Vec<BankEvent> = (0..clients.len())
        .map(|i| BankEvent {
            client: clients[i].clone(),
            at: at[i] / 1e3,
            event: events[i].clone(),
            latency: latency[i],
            count: if counts[i].is_finite() {
                counts[i] as usize
            } else {
                1
            },
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("{} has no rows", csv.path.display()).into());
    }
    let mut order: Vec<String> = rows
        .iter()
        .map(|r| r.client.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    order.sort_by_key(|c| if c.starts_with("tikv-plan") { 0 } else { 1 });
    let count = |client: &str, event: &str| {
        rows.iter()
            .filter(|r| r.client == client && r.event == event)
            .map(|r| r.count)
            .sum::<usize>()
    };
    let lines: Vec<String> = order
        .iter()
        .map(|c| {
            format!(
                "{c}: {} transfers committed, {} failed; {} audits completed, {} failed, {} bad",
                count(c, "committed"),
                count(c, "transfer_failed"),
                count(c, "audited") + count(c, "bad_audit"),
                count(c, "audit_failed"),
                count(c, "bad_audit"),
            )
        })
        .collect();
    let end = info
        .get("seconds")
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| rows.iter().map(|r| r.at).fold(0.0, f64::max));
    let most = order
        .iter()
        .map(|c| count(c, "committed"))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let footer = format!(
        "From {} ({}; {}). Grey lines: a worker SIGKILLed (same seed, same moments for both clients).",
        csv.path.display(),
        info.get("label").map_or("unlabelled run", String::as_str),
        info.get("machine").map_or("unknown machine", String::as_str),
    );
    let root = canvas(
        out,
        (1100, 760),
        "Killed mid-transaction: 3 workers moving money among 8 accounts, one SIGKILLed every 0.5–2 s, an auditor",
        &footer,
    )?;
    let (text_area, plots) = root.split_vertically(24 + 18 * lines.len() as u32);
    for (i, line) in lines.iter().enumerate() {
        let color = client_color(line.split(':').next().unwrap_or(""));
        text_area.draw(&Text::new(
            line.clone(),
            (70, 6 + 18 * i as i32),
            text_style(14, &color),
        ))?;
    }
    let (top, bottom) = plots.split_vertically(300);
    let kills: Vec<f64> = rows
        .iter()
        .filter(|r| r.event == "killed" && Some(&r.client) == order.first())
        .map(|r| r.at)
        .collect();

    let mut chart = ChartBuilder::on(&top)
        .caption("Transfers committed so far", (FONT, 15))
        .margin(8)
        .margin_right(18)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..most * 1.08)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&|v| format!("{v:.0} s"))
        .y_desc("transfers")
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(245, 245, 245))
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    chart.draw_series(
        kills
            .iter()
            .map(|&k| PathElement::new(vec![(k, 0.0), (k, most * 1.08)], LIGHT.stroke_width(1))),
    )?;
    for client in &order {
        let color = client_color(client);
        let mut n = 0.0;
        let mut points = vec![(0.0, 0.0)];
        for r in rows
            .iter()
            .filter(|r| &r.client == client && r.event == "committed")
        {
            points.push((r.at, n));
            n += 1.0;
            points.push((r.at, n));
        }
        points.push((end, n));
        chart
            .draw_series(std::iter::once(PathElement::new(
                points,
                color.stroke_width(2),
            )))?
            .label(client.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(LIGHT)
        .label_font((FONT, 12))
        .draw()?;

    let transfers: Vec<&BankEvent> = rows
        .iter()
        .filter(|r| r.event == "committed" || r.event == "transfer_failed")
        .collect();
    let high = transfers
        .iter()
        .map(|r| r.latency)
        .filter(|v| v.is_finite())
        .fold(10.0f64, f64::max);
    let y = 0.1..high * 1.6;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "Each transfer at its start: its latency, committed (dot) or failed (cross)",
            (FONT, 15),
        )
        .margin(8)
        .margin_right(18)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, y.clone().log_scale())?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&|v| format!("{v:.0} s"))
        .y_label_formatter(&|v| fmt_ms(*v))
        .x_desc("time since the workers started")
        .y_desc("latency of the transfer")
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(245, 245, 245))
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    chart.draw_series(
        kills
            .iter()
            .map(|&k| PathElement::new(vec![(k, y.start), (k, y.end)], LIGHT.stroke_width(1))),
    )?;
    for client in &order {
        let color = client_color(client);
        let mine = transfers.iter().filter(|r| &r.client == client);
        let start = |r: &BankEvent| (r.at - r.latency / 1e3).max(0.0);
        let y_of = |r: &BankEvent| r.latency.clamp(y.start, y.end);
        chart.draw_series(
            mine.clone()
                .filter(|r| r.event == "committed")
                .map(|r| Circle::new((start(r), y_of(r)), 2, color.mix(0.7).filled())),
        )?;
        chart.draw_series(
            mine.filter(|r| r.event != "committed")
                .map(|r| Cross::new((start(r), y_of(r)), 4, color.stroke_width(1))),
        )?;
    }
    root.present()?;
    Ok(lines.join("\n") + "\n")
}

// ---------------------------------------------------------------------------
// Chaos timeline.

/// The raw suite's fault kinds in report order (see
/// `tikv_plan_chaos::FaultKind::ALL`); others go after them.
const FAULT_ORDER: [&str; 19] = [
    "down",
    "hang_connect",
    "hang_respond",
    "slow",
    "busy0",
    "busy_wait",
    "transfer",
    "transfer_stale",
    "cold_accept",
    "cold_not_leader_first",
    "split",
    "drop_put",
    "drop_batch_put",
    "drop_delete",
    "drop_batch_delete",
    "drop_delete_range",
    "drop_cas",
    "pd_leader",
    "pd_down",
];

fn plot_chaos(data: &Path, out: &Path) -> Result<String> {
    let csv = Csv::read(&data.join("chaos-timeline.csv"))?;
    let record = csv.texts("record")?;
    let start = csv.numbers("start_ms")?;
    let duration = csv.numbers("duration_ms")?;
    let kind = csv.texts("kind")?;
    let outcome = csv.texts("outcome")?;
    let detail = csv.texts("detail")?;
    let n = record.len();
    let faults: Vec<usize> = (0..n).filter(|&i| record[i] == "fault").collect();
    // The workload's operations (the reads after healing are left out, as
    // the run's own counts leave them out).
    let ops: Vec<usize> = (0..n)
        .filter(|&i| record[i] == "op" && detail[i] != "final")
        .collect();
    if ops.is_empty() {
        return Err(format!("{} has no operations", csv.path.display()).into());
    }
    let count = |what: &str| ops.iter().filter(|&&i| outcome[i] == what).count();
    let (ok, undetermined, failed, abandoned) = (
        count("ok"),
        count("undetermined"),
        count("failed"),
        count("abandoned"),
    );
    let to_s = |ms: f64| ms / 1e3;
    let end_s = ops
        .iter()
        .chain(&faults)
        .map(|&i| to_s(start[i] + duration[i].max(0.0)))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let x = 0.0..(end_s * 1.01).max(1.0);

    // Fault lanes: the kinds present, in report order.
    let present: BTreeSet<&str> = faults.iter().map(|&i| kind[i].as_str()).collect();
    let mut lanes: Vec<&str> = FAULT_ORDER
        .iter()
        .copied()
        .filter(|k| present.contains(k))
        .collect();
    lanes.extend(present.iter().filter(|k| !FAULT_ORDER.contains(k)));
    let lane_of = |k: &str| lanes.iter().position(|l| *l == k).unwrap_or(0);

    let headline = format!(
        "{} operations: {ok} ok, {undetermined} undetermined, {failed} failed{}; {} faults of {} kinds",
        ops.len(),
        if abandoned > 0 {
            format!(", {abandoned} abandoned")
        } else {
            String::new()
        },
        faults.len(),
        lanes.len()
    );
    // The run's first line ("chaos: seed 1 for 20s, ..."), when perf/plot.sh
    // kept the output beside the data.
    let run = std::fs::read_to_string(data.join("chaos-run.txt"))
        .ok()
        .and_then(|t| t.lines().next().map(str::to_owned))
        .unwrap_or_else(|| {
            "cargo run --release -p tikv-plan-chaos -- raw ... --timeline FILE".to_owned()
        });
    let footer = format!(
        "From {} ({run}). Operations counted at their start; the reads after healing are left out.",
        csv.path.display()
    );
    let root = canvas(
        out,
        (1100, 980),
        &format!("A chaos run of the raw suite: {headline}"),
        &footer,
    )?;
    let lane_height = 15u32;
    let (fault_area, rest) = root.split_vertically(60 + lane_height * lanes.len() as u32);
    let (rate_area, latency_area) = rest.split_vertically(240);

    // Faults.
    {
        let mut chart = ChartBuilder::on(&fault_area)
            .caption(
                "Faults: a bar from injection to heal; a tick for one that is not healed (a transfer, a split, a dropped response order, a PD leader change)",
                (FONT, 13),
            )
            .margin(6)
            .margin_right(18)
            .x_label_area_size(18)
            .y_label_area_size(150)
            .build_cartesian_2d(x.clone(), -0.5f64..lanes.len() as f64 - 0.5)?;
        let lane_label = |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                lanes
                    .get(i as usize)
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(lanes.len())
            .y_label_formatter(&lane_label)
            .y_label_style((FONT, 11))
            .x_labels(12)
            .x_label_formatter(&|v| format!("{v:.0} s"))
            .light_line_style(RGBColor(245, 245, 245))
            .bold_line_style(RGBColor(230, 230, 230))
            .draw()?;
        let healed = faults.iter().filter(|&&i| outcome[i] == "healed");
        chart.draw_series(healed.map(|&i| {
            let lane = lane_of(&kind[i]) as f64;
            Rectangle::new(
                [
                    (to_s(start[i]), lane - 0.35),
                    (
                        to_s(start[i] + duration[i]).max(to_s(start[i]) + 0.01),
                        lane + 0.35,
                    ),
                ],
                FAILED.mix(0.45).filled(),
            )
        }))?;
        let instant = faults.iter().filter(|&&i| outcome[i] != "healed");
        chart.draw_series(instant.map(|&i| {
            let lane = lane_of(&kind[i]) as f64;
            PathElement::new(
                vec![(to_s(start[i]), lane - 0.4), (to_s(start[i]), lane + 0.4)],
                RGBColor(120, 40, 160).stroke_width(1),
            )
        }))?;
    }

    // Operations started per bin, by outcome.
    let bin = 0.25f64;
    let bins = (x.end / bin).ceil() as usize;
    let mut per_bin = vec![[0usize; 3]; bins.max(1)];
    let mut ok_latency: Vec<Vec<f64>> = vec![Vec::new(); bins.max(1)];
    for &i in &ops {
        let b = ((to_s(start[i]) / bin) as usize).min(per_bin.len() - 1);
        match outcome[i].as_str() {
            "ok" => {
                per_bin[b][0] += 1;
                ok_latency[b].push(duration[i]);
            }
            "undetermined" => per_bin[b][1] += 1,
            _ => per_bin[b][2] += 1,
        }
    }
    {
        let top = per_bin
            .iter()
            .map(|c| (c[0] + c[1] + c[2]) as f64 / bin)
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(&rate_area)
            .caption(
                format!(
                    "Operations started per second ({} ms bins), by outcome",
                    bin * 1e3
                ),
                (FONT, 13),
            )
            .margin(6)
            .margin_right(18)
            .x_label_area_size(22)
            .y_label_area_size(150)
            .build_cartesian_2d(x.clone(), 0f64..top)?;
        chart
            .configure_mesh()
            .x_labels(12)
            .x_label_formatter(&|v| format!("{v:.0} s"))
            .y_labels(5)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(RGBColor(245, 245, 245))
            .bold_line_style(RGBColor(230, 230, 230))
            .draw()?;
        let names = ["ok", "undetermined", "failed or abandoned"];
        let colors = [OK, UNDETERMINED, FAILED];
        for layer in 0..3 {
            let color = colors[layer];
            chart
                .draw_series(per_bin.iter().enumerate().map(|(b, c)| {
                    let below: usize = c[..layer].iter().sum();
                    let x0 = b as f64 * bin;
                    Rectangle::new(
                        [
                            (x0, below as f64 / bin),
                            (x0 + bin * 0.92, (below + c[layer]) as f64 / bin),
                        ],
                        color.filled(),
                    )
                }))?
                .label(names[layer])
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(LIGHT)
            .label_font((FONT, 11))
            .draw()?;
    }

    // Latency: p50 and p99 of the ok operations per bin, and every other
    // operation on its own.
    {
        let all: Vec<f64> = ops
            .iter()
            .map(|&i| duration[i])
            .filter(|d| d.is_finite())
            .collect();
        let low = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01);
        let high = all.iter().copied().fold(0.0f64, f64::max).max(10.0);
        let y = (low * 0.8)..(high * 1.5);
        let mut chart = ChartBuilder::on(&latency_area)
            .caption(
                "Duration (log scale): the ok operations' p50 and p99 per bin; every undetermined or failed operation as a mark at its start",
                (FONT, 13),
            )
            .margin(6)
            .margin_right(18)
            .x_label_area_size(36)
            .y_label_area_size(150)
            .build_cartesian_2d(x.clone(), y.clone().log_scale())?;
        chart
            .configure_mesh()
            .x_labels(12)
            .x_label_formatter(&|v| format!("{v:.0} s"))
            .y_label_formatter(&|v| fmt_ms(*v))
            .x_desc("time since the run started")
            .axis_desc_style((FONT, 12))
            .light_line_style(RGBColor(245, 245, 245))
            .bold_line_style(RGBColor(230, 230, 230))
            .draw()?;
        for (p, color, name) in [
            (50.0, OK, "ok: p50"),
            (99.0, RGBColor(40, 100, 40), "ok: p99"),
        ] {
            let points: Vec<(f64, f64)> = ok_latency
                .iter_mut()
                .enumerate()
                .filter(|(_, l)| !l.is_empty())
                .map(|(b, l)| {
                    (
                        (b as f64 + 0.5) * bin,
                        percentile(l, p).clamp(y.start, y.end),
                    )
                })
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    points,
                    color.stroke_width(2),
                )))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        for (what, color, name) in [
            ("undetermined", UNDETERMINED, "undetermined"),
            ("failed", FAILED, "failed"),
        ] {
            let marks = ops
                .iter()
                .filter(|&&i| outcome[i] == what && duration[i].is_finite());
            chart
                .draw_series(marks.map(|&i| {
                    Circle::new(
                        (to_s(start[i]), duration[i].clamp(y.start, y.end)),
                        2,
                        color.mix(0.7).filled(),
                    )
                }))?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 6, y), 3, color.filled()));
        }
        let abandoned_marks = ops.iter().filter(|&&i| outcome[i] == "abandoned");
        chart
            .draw_series(
                abandoned_marks
                    .map(|&i| Cross::new((to_s(start[i]), y.end * 0.9), 5, FAILED.stroke_width(2))),
            )?
            .label("abandoned (no answer)")
            .legend(|(x, y)| Cross::new((x + 6, y), 5, FAILED.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(LIGHT)
            .label_font((FONT, 11))
            .draw()?;
    }
    root.present()?;

    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for &i in &faults {
        *by_kind.entry(kind[i].as_str()).or_default() += 1;
    }
    let kinds: Vec<String> = lanes
        .iter()
        .map(|k| format!("{k}={}", by_kind.get(k).copied().unwrap_or(0)))
        .collect();
    Ok(format!("{headline}\nfaults: {}\n", kinds.join(" ")))
}

// ---------------------------------------------------------------------------

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(picture) = args.next() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut data = PathBuf::from("docs/img/data");
    let mut out = None;
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("plot: {flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--data" => data = PathBuf::from(value),
            "--out" => out = Some(PathBuf::from(value)),
            other => {
                eprintln!("plot: unknown option {other}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    type Draw = fn(&Path, &Path) -> Result<String>;
    let (draw, file): (Draw, &str) = match picture.as_str() {
        "ratios" => (plot_ratios, "benchmark-ratios.svg"),
        "leader-loss" => (plot_leader_loss, "leader-loss.svg"),
        "cut-off" => (plot_cut_off, "cut-off.svg"),
        "chaos" => (plot_chaos, "chaos-timeline.svg"),
        "killed-bank" => (plot_killed_bank, "killed-bank.svg"),
        "week" => (week::plot_week, "week.svg"),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let out = out.unwrap_or_else(|| Path::new("docs/img").join(file));
    match draw(&data, &out) {
        Ok(summary) => {
            print!("{summary}");
            eprintln!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plot {picture}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_may_be_quoted() {
        let records = parse_csv("a,b,c\n1,\"x, \"\"y\"\"\",\n2,,z");
        assert_eq!(records.len(), 3);
        assert_eq!(records[1], ["1", "x, \"y\"", ""]);
        assert_eq!(records[2], ["2", "", "z"]);
    }

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, f64::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        assert!(median(&[]).is_nan());
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 99.0), 99.0);
        assert_eq!(fmt_ms(0.25), "250 µs");
        assert_eq!(fmt_ms(1500.0), "1.5 s");
    }
}
