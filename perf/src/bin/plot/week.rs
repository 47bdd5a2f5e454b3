//! The week picture (`plot week`): a rolling restart's latency and failures
//! over time for each client, and how fast a crashed store's keys become
//! readable again, in election timeouts.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::{canvas, client_color, run_info, text_style, Csv, Result, FAILED, FONT, GREY, LIGHT};

/// One 100 ms bucket of a rolling-restart trial.
struct Bucket {
    at: f64,
    calls: f64,
    failed: f64,
    p99: f64,
}

/// A rolling-restart trial: its buckets and the restart's window (s).
struct Trial {
    buckets: Vec<Bucket>,
    restart: (f64, f64),
}

/// `week-restart.csv` by (workload, client).
fn restart_trials(data: &Path) -> Result<BTreeMap<(String, String), Trial>> {
    let csv = Csv::read(&data.join("week-restart.csv"))?;
    let (clients, workloads) = (csv.texts("client")?, csv.texts("workload")?);
    let (at, calls, failed, p99) = (
        csv.numbers("bucket_start_s")?,
        csv.numbers("calls")?,
        csv.numbers("failed")?,
        csv.numbers("p99_ms")?,
    );
    let (from, to) = (
        csv.numbers("restart_start_s")?,
        csv.numbers("restart_end_s")?,
    );
    let mut trials: BTreeMap<(String, String), Trial> = BTreeMap::new();
    for i in 0..clients.len() {
        let trial = trials
            .entry((workloads[i].clone(), clients[i].clone()))
            .or_insert_with(|| Trial {
                buckets: Vec::new(),
                restart: (from[i], to[i]),
            });
        trial.buckets.push(Bucket {
            at: at[i],
            calls: calls[i],
            failed: failed[i],
            p99: p99[i],
        });
    }
    if trials.is_empty() {
        return Err(format!("{} has no rows", csv.path.display()).into());
    }
    Ok(trials)
}

/// `week-crash.csv`: per client, when each key was readable again (s), and
/// the election timeout (s).
fn crash_trials(data: &Path) -> Result<(BTreeMap<String, Vec<f64>>, f64, usize)> {
    let csv = Csv::read(&data.join("week-crash.csv"))?;
    let clients = csv.texts("client")?;
    let (keys, e_ms, readable) = (
        csv.numbers("keys")?,
        csv.numbers("election_timeout_ms")?,
        csv.numbers("readable_ms")?,
    );
    let mut by_client: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for i in 0..clients.len() {
        by_client
            .entry(clients[i].clone())
            .or_default()
            .push(readable[i] / 1e3);
    }
    let e = e_ms.first().copied().unwrap_or(f64::NAN) / 1e3;
    let total = keys.first().copied().unwrap_or(0.0) as usize;
    if by_client.is_empty() || !e.is_finite() || total == 0 {
        return Err(format!("{} has no usable rows", csv.path.display()).into());
    }
    for times in by_client.values_mut() {
        times.sort_by(f64::total_cmp);
    }
    Ok((by_client, e, total))
}

/// Clients in a stable order: tikv-plan's first.
fn ordered<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut names: Vec<String> = names.cloned().collect();
    names.sort_by_key(|c| {
        (
            !c.starts_with("tikv-plan"),
            c.contains("leaderless_wait"),
            c.clone(),
        )
    });
    names.dedup();
    names
}

/// A client's colour here: client-rust's rule in our client is grey.
fn color(client: &str) -> RGBColor {
    if client.contains("leaderless_wait") {
        GREY
    } else {
        client_color(client)
    }
}

pub(super) fn plot_week(data: &Path, out: &Path) -> Result<String> {
    let restarts = restart_trials(data)?;
    let (crashes, e, total) = crash_trials(data)?;
    let info = run_info(data, "week-crash");
    let footer = format!(
        "From {}/week-restart.csv and week-crash.csv ({}; {}).",
        data.display(),
        info.get("label").map_or("unlabelled run", String::as_str),
        info.get("machine")
            .map_or("unknown machine", String::as_str),
    );
    let root = canvas(
        out,
        (1100, 980),
        "A week of operations: a rolling restart (leaders evicted first) and a crash with elections",
        &footer,
    )?;
    let mut summary = String::new();
    let workloads: Vec<String> = ordered(restarts.keys().map(|(w, _)| w));
    let (top, bottom) = root.split_vertically(620);
    let panels = top.split_evenly((workloads.len().max(1), 1));
    for (workload, panel) in workloads.iter().zip(panels.iter()) {
        let trials: Vec<(&String, &Trial)> = restarts
            .iter()
            .filter(|((w, _), _)| w == workload)
            .map(|((_, c), t)| (c, t))
            .collect();
        let end = trials
            .iter()
            .flat_map(|(_, t)| t.buckets.iter().map(|b| b.at + 0.1))
            .fold(1.0f64, f64::max);
        let high = trials
            .iter()
            .flat_map(|(_, t)| t.buckets.iter().map(|b| b.p99))
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "Rolling restart, 64 tasks of {}: p99 per 100 ms (shaded: the restart; red marks: failed calls)",
                    match workload.as_str() {
                        "raw" => "raw gets and puts",
                        "transfer" => "2-key transactional transfers",
                        other => other,
                    }
                ),
                (FONT, 15),
            )
            .margin(8)
            .margin_right(18)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, (0.1..high * 2.0).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(12)
            .x_label_formatter(&|v| format!("{v:.0} s"))
            .y_desc("p99, ms")
            .axis_desc_style((FONT, 13))
            .light_line_style(RGBColor(245, 245, 245))
            .bold_line_style(RGBColor(230, 230, 230))
            .draw()?;
        if let Some((_, t)) = trials.first() {
            let (a, b) = t.restart;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, 0.1), (b, high * 2.0)],
                LIGHT.mix(0.35).filled(),
            )))?;
        }
        for client in ordered(trials.iter().map(|(c, _)| *c)) {
            let Some((_, trial)) = trials.iter().find(|(c, _)| **c == client) else {
                continue;
            };
            let c = color(&client);
            let points: Vec<(f64, f64)> = trial
                .buckets
                .iter()
                .filter(|b| b.calls > 0.0 && b.p99.is_finite() && b.p99 > 0.0)
                .map(|b| (b.at + 0.05, b.p99))
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(points, c.stroke_width(1))))?
                .label(client.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            chart.draw_series(
                trial
                    .buckets
                    .iter()
                    .filter(|b| b.failed > 0.0)
                    .map(|b| Cross::new((b.at + 0.05, high * 1.6), 4, FAILED.stroke_width(2))),
            )?;
            let calls: f64 = trial.buckets.iter().map(|b| b.calls).sum();
            let failed: f64 = trial.buckets.iter().map(|b| b.failed).sum();
            summary.push_str(&format!(
                "rolling restart, {workload}, {client}: {calls:.0} calls, {failed:.0} failed\n"
            ));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(LIGHT)
            .label_font((FONT, 12))
            .draw()?;
    }

    let end_e = crashes
        .values()
        .filter_map(|t| t.last())
        .fold(2.5 * e, |a, &b| a.max(b))
        / e
        * 1.05;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            format!(
                "Crash of a store leading {total} Regions, no eviction: share of its keys readable again (E = {:.0} ms)",
                e * 1e3
            ),
            (FONT, 15),
        )
        .margin(8)
        .margin_right(18)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end_e, 0.0..1.02)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&|v| format!("{v:.1} E"))
        .y_label_formatter(&|v| format!("{:.0} %", v * 100.0))
        .y_desc("keys readable")
        .axis_desc_style((FONT, 13))
        .light_line_style(RGBColor(245, 245, 245))
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    for x in [1.0, 2.0] {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, 1.02)],
            LIGHT.stroke_width(1),
        )))?;
    }
    for client in ordered(crashes.keys()) {
        let times = &crashes[&client];
        let c = color(&client);
        let mut points = vec![(0.0, 0.0)];
        for (i, t) in times.iter().enumerate() {
            let x = t / e;
            points.push((x, i as f64 / total as f64));
            points.push((x, (i + 1) as f64 / total as f64));
        }
        chart
            .draw_series(std::iter::once(PathElement::new(points, c.stroke_width(2))))?
            .label(client.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        let last = times.last().map_or(f64::NAN, |t| t / e);
        summary.push_str(&format!(
            "crash, {client}: {} of {total} keys readable again, the last at {last:.2} E\n",
            times.len()
        ));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(LIGHT)
        .label_font((FONT, 12))
        .draw()?;
    bottom.draw(&Text::new(
        "grey lines: E and 2E, the range raft-rs draws election timeouts from".to_owned(),
        (80, 40),
        text_style(11, &GREY),
    ))?;
    Ok(summary)
}
