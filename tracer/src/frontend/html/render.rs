//! The HTML page: plotters draws each plot as inline SVG; the report's
//! numbers and diagnoses are plain HTML. No script, no network.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;

use crate::frontend::units::{self, BytesForm};
use crate::frontend::words;
use crate::geometry::{DevId, DiskGeometry};
use crate::model::{Distribution, Measures, OpMeasures, Report};

use super::series::{Series, LATENCY_ROWS, OFFSET_ROWS, TIME_BINS};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 300;
const USER_COLOR: RGBColor = RGBColor(31, 119, 180);
const COMMAND_COLOR: RGBColor = RGBColor(214, 39, 40);

/// The whole page.
pub fn page(report: &Report, series: &Series, geometry: &[DiskGeometry], source: &str) -> String {
    let mut html = String::with_capacity(256 * 1024);
    // The requeues the report counted (each requeued command is still one command).
    let mut total = OpMeasures::default();
    for device in &report.devices {
        for op in device.measures.ops.values() {
            total.add_counts(op);
        }
    }
    let requeues = match total.requeues {
        0 => String::new(),
        n => format!(
            "<p class=\"meta\">{} requeues (commands the driver gave back to be issued again; each counts once above)</p>",
            crate::frontend::units::thousands(n)
        ),
    };
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>iosplit-trace: {}</title><style>{}</style></head><body>\
         <h1>iosplit-trace report</h1><p class=\"meta\">{} · {:.2} s traced · {} user I/Os · {} commands</p>{requeues}",
        escape(source),
        STYLE,
        escape(source),
        report.duration_s,
        // User I/Os as submitted: one remapped down a stack is its top's.
        series.user_ios,
        // Commands as the engine counted them (a re-issue after a requeue
        // is not one), on the disks: a stacked device's bio handed down is
        // carried again by the disk below.
        series.commands,
    );
    if series.stacked_commands > 0 {
        let _ = write!(
            html,
            "<p class=\"meta\">Not counted above: bios stacked devices (dm, md) handed down to the devices below, which carried them again: {}; each device's own counts are under Measures per device</p>",
            units::thousands(series.stacked_commands)
        );
    }
    diagnoses(&mut html, report);
    section(&mut html, "User I/O and command sizes", &sizes_svg(report));
    section(
        &mut html,
        "User I/Os/s versus commands/s",
        &rates_svg(series),
    );
    section(
        &mut html,
        "Command latency over time (issue → complete)",
        &latency_svg(series),
    );
    html.push_str("<section><h2>Offsets over time</h2>");
    let _ = write!(
        html,
        "<p>{} of {} commands start or end off the 4 KiB grid.</p>",
        series.misaligned_4k_commands, series.commands
    );
    for grid in &series.offsets {
        let disk = geometry
            .iter()
            .find(|disk| disk.dev == Some(DevId::from_kernel(grid.dev)));
        html.push_str(&offset_svg(series, grid, disk));
    }
    if series.offsets.is_empty() {
        html.push_str("<p>No device commands were recorded.</p>");
    }
    html.push_str("</section>");
    section(&mut html, "Split causes", &split_causes(report));
    section(&mut html, "Measures per device", &devices(report));
    html.push_str("</body></html>\n");
    html
}

const STYLE: &str = "body{font-family:sans-serif;max-width:900px;margin:1em auto;color:#222}\
h2{border-bottom:1px solid #ccc}.meta{color:#555}.diag{border-left:4px solid #d62728;padding:.3em .8em;margin:.8em 0;background:#fafafa}\
.diag.info{border-color:#1f77b4}.diag.warning{border-color:#ff7f0e}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
table.evidence th{text-align:left;font-weight:normal;color:#555}";

fn section(html: &mut String, title: &str, body: &str) {
    let _ = write!(html, "<section><h2>{}</h2>{body}</section>", escape(title));
}

fn diagnoses(html: &mut String, report: &Report) {
    html.push_str("<section><h2>Diagnoses</h2>");
    if report.diagnoses.is_empty() {
        html.push_str("<p>No findings.</p>");
    }
    for diagnosis in words::by_severity(&report.diagnoses) {
        let severity = words::severity_label(diagnosis.severity).to_lowercase();
        let fix = diagnosis
            .fix
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| escape(line.trim()))
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = write!(
            html,
            "<div class=\"diag {severity}\"><h3>{} on {} ({severity})</h3><p>{}</p><p><b>Fix:</b> {fix}</p>",
            escape(diagnosis.code.as_str()),
            escape(&diagnosis.device),
            escape(&diagnosis.explanation),
        );
        let measures = words::measures_of(report, &diagnosis.device);
        for said in words::what_ifs(diagnosis, measures) {
            let _ = write!(
                html,
                "<p><b>{}:</b> {}</p>",
                escape(&capitalized(said.prediction.label())),
                escape(&said.sentence)
            );
        }
        html.push_str("<details><summary>Evidence</summary><table class=\"evidence\">");
        for (key, value) in words::evidence_pairs(diagnosis) {
            let _ = write!(
                html,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(&key),
                escape(&value)
            );
        }
        html.push_str("</table></details></div>");
    }
    html.push_str("</section>");
}

/// A sentence's first letter in upper case.
fn capitalized(sentence: &str) -> String {
    let mut chars = sentence.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Every disk and partition with I/O: each operation's measures in words
/// (requeues only where there were some).
fn devices(report: &Report) -> String {
    let mut html = String::new();
    let mut shown = |name: &str, measures: &Measures| {
        let ops: Vec<_> = measures
            .ops
            .iter()
            .filter(|(_, op)| op.user_ios > 0 || op.commands > 0 || op.failed_commands > 0)
            .collect();
        if ops.is_empty() {
            return;
        }
        let _ = write!(html, "<h3 class=\"device\">{}</h3>", escape(name));
        for (op, measures) in ops {
            let _ = write!(html, "<p><b>{}</b></p><ul>", op.as_str());
            for sentence in words::op_sentences(*op, measures) {
                let _ = write!(html, "<li>{}</li>", escape(&sentence));
            }
            html.push_str("</ul>");
        }
    };
    for device in &report.devices {
        shown(&device.name, &device.measures);
        for part in &device.partitions {
            shown(&part.name, &part.measures);
        }
    }
    if html.is_empty() {
        html.push_str("<p>No I/O was recorded.</p>");
    }
    html
}

/// Log2 bucket counts summed over every device and op.
fn merged_buckets(
    report: &Report,
    pick: fn(&crate::model::OpMeasures) -> &Distribution,
) -> BTreeMap<u64, u64> {
    let mut buckets = BTreeMap::new();
    for device in &report.devices {
        for measures in device.measures.ops.values() {
            for bucket in &pick(measures).buckets {
                *buckets.entry(bucket.low).or_insert(0) += bucket.count;
            }
        }
    }
    buckets
}

fn sizes_svg(report: &Report) -> String {
    let user = merged_buckets(report, |m| &m.user_io_size);
    let commands = merged_buckets(report, |m| &m.command_size);
    let lows: Vec<u64> = user
        .keys()
        .chain(commands.keys())
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if lows.is_empty() {
        return "<p>No sizes were recorded.</p>".into();
    }
    let max = user
        .values()
        .chain(commands.values())
        .copied()
        .max()
        .unwrap_or(1);
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..lows.len() as f64 - 0.5, 0u64..max + max / 10 + 1)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(lows.len())
            .x_label_formatter(&|x| {
                at_whole(*x, &lows)
                    .map(|low| units::bytes_as(*low as f64, BytesForm::Axis))
                    .unwrap_or_default()
            })
            .x_desc("size (bytes, log2 bucket start)")
            .y_desc("count")
            .draw()?;
        for (series, color, offset, label) in [
            (&user, USER_COLOR, -0.4, "user I/Os"),
            (&commands, COMMAND_COLOR, 0.0, "commands"),
        ] {
            chart
                .draw_series(lows.iter().enumerate().map(|(i, low)| {
                    let count = series.get(low).copied().unwrap_or(0);
                    Rectangle::new(
                        [(i as f64 + offset, 0), (i as f64 + offset + 0.4, count)],
                        color.filled(),
                    )
                }))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        Ok(())
    })
}

fn rates_svg(series: &Series) -> String {
    let seconds = |bin: usize| bin as f64 * series.bin_ns as f64 / 1e9;
    let user: Vec<(f64, f64)> = series
        .user_ios_per_bin
        .iter()
        .enumerate()
        .map(|(b, c)| (seconds(b), series.per_second(*c)))
        .collect();
    let commands: Vec<(f64, f64)> = series
        .commands_per_bin
        .iter()
        .enumerate()
        .map(|(b, c)| (seconds(b), series.per_second(*c)))
        .collect();
    let max = user
        .iter()
        .chain(&commands)
        .map(|p| p.1)
        .fold(1.0, f64::max);
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..seconds(TIME_BINS), 0.0..max * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("per second")
            .draw()?;
        chart
            .draw_series(LineSeries::new(user, USER_COLOR.stroke_width(2)))?
            .label("user I/Os/s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], USER_COLOR));
        chart
            .draw_series(LineSeries::new(commands, COMMAND_COLOR.stroke_width(2)))?
            .label("commands/s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], COMMAND_COLOR));
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        Ok(())
    })
}

/// White to dark red on a log scale of `count` over `max`.
/// The non-empty cells of a time-bin × row grid, as rectangles colored by
/// count; `corners` places cell (bin, row) on the chart.
fn heat_cells<'a, const ROWS: usize, C: 'a>(
    cells: &'a [[u64; ROWS]],
    max: u64,
    corners: impl Fn(usize, usize) -> [C; 2] + Copy + 'a,
) -> impl Iterator<Item = Rectangle<C>> + 'a {
    cells.iter().enumerate().flat_map(move |(bin, rows)| {
        rows.iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .map(move |(row, count)| Rectangle::new(corners(bin, row), heat(*count, max).filled()))
    })
}

fn heat(count: u64, max: u64) -> RGBColor {
    let level = ((count as f64).ln_1p() / (max as f64).ln_1p().max(1e-9)).clamp(0.0, 1.0);
    let fade = |full: f64| (255.0 - (255.0 - full) * level) as u8;
    RGBColor(fade(140.0), fade(20.0), fade(20.0))
}

fn latency_svg(series: &Series) -> String {
    let max = series.latency.iter().flatten().copied().max().unwrap_or(0);
    if max == 0 {
        return "<p>No issue → complete pairs were recorded (bio-based device, or no commands).</p>".into();
    }
    let seconds = |bin: usize| bin as f64 * series.bin_ns as f64 / 1e9;
    svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..seconds(TIME_BINS), 0..LATENCY_ROWS)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds")
            .y_desc("latency")
            .y_label_formatter(&|row| micros(1u64 << row))
            .draw()?;
        chart.draw_series(heat_cells(&series.latency, max, |bin, row| {
            [(seconds(bin), row), (seconds(bin + 1), row + 1)]
        }))?;
        Ok(())
    })
}

fn offset_svg(
    series: &Series,
    grid: &super::series::OffsetGrid,
    disk: Option<&DiskGeometry>,
) -> String {
    let max = grid.cells.iter().flatten().copied().max().unwrap_or(1);
    let seconds = |bin: usize| bin as f64 * series.bin_ns as f64 / 1e9;
    let row_sectors = grid.sectors as f64 / OFFSET_ROWS as f64;
    let name = disk.map(|d| d.name.clone()).unwrap_or_else(|| {
        let dev = DevId::from_kernel(grid.dev);
        format!("{}:{}", dev.major, dev.minor)
    });
    let mut html = String::new();
    let physical = match disk.map(|d| d.physical_block_size) {
        Some(size) if size > 0 => units::bytes_as(f64::from(size), BytesForm::Axis),
        _ => "unknown (no geometry)".to_string(),
    };
    let _ = write!(
        html,
        "<h3>{}</h3><p>Physical block {} · each row {} · dashed lines: partition starts.</p>",
        escape(&name),
        physical,
        // Whole bytes, as the page has always labelled rows and offsets.
        units::bytes_as(((row_sectors * 512.0) as u64) as f64, BytesForm::Axis)
    );
    html.push_str(&svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..seconds(TIME_BINS), 0.0..grid.sectors as f64)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds")
            .y_desc("offset")
            .y_label_formatter(&|sector| {
                units::bytes_as(((*sector * 512.0) as u64) as f64, BytesForm::Axis)
            })
            .draw()?;
        chart.draw_series(heat_cells(&grid.cells, max, |bin, row| {
            [
                (seconds(bin), row as f64 * row_sectors),
                (seconds(bin + 1), (row + 1) as f64 * row_sectors),
            ]
        }))?;
        for part in disk.map(|d| d.partitions.as_slice()).unwrap_or(&[]) {
            let y = part.start as f64;
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, y), (seconds(TIME_BINS), y)],
                    6,
                    4,
                    USER_COLOR.stroke_width(1),
                ))?
                .label(part.name.clone());
            chart.draw_series(std::iter::once(Text::new(
                format!("{} starts", part.name),
                (
                    seconds(0) + series.bin_ns as f64 / 1e9,
                    y + grid.sectors as f64 / 60.0,
                ),
                ("sans-serif", 12).into_font().color(&USER_COLOR),
            )))?;
        }
        Ok(())
    }));
    html
}

fn split_causes(report: &Report) -> String {
    let mut causes: BTreeMap<&str, u64> = BTreeMap::new();
    for device in &report.devices {
        for measures in device.measures.ops.values() {
            for (cause, count) in &measures.split_causes {
                *causes.entry(cause.key()).or_insert(0) += count;
            }
        }
    }
    if causes.is_empty() {
        return "<p>No splits.</p>".into();
    }
    let mut html = String::from("<table><tr><th>cause</th><th>splits</th></tr>");
    for (cause, count) in &causes {
        let _ = write!(html, "<tr><td>{}</td><td>{count}</td></tr>", escape(cause));
    }
    html.push_str("</table>");
    let names: Vec<&str> = causes.keys().copied().collect();
    let max = causes.values().copied().max().unwrap_or(1);
    html.push_str(&svg(|root| {
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..names.len() as f64 - 0.5, 0u64..max + max / 10 + 1)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len() + 1)
            .x_label_formatter(&|x| {
                at_whole(*x, &names)
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            })
            .y_desc("splits")
            .draw()?;
        chart.draw_series(causes.values().enumerate().map(|(i, count)| {
            Rectangle::new(
                [(i as f64 - 0.3, 0), (i as f64 + 0.3, *count)],
                COMMAND_COLOR.filled(),
            )
        }))?;
        Ok(())
    }));
    html
}

/// The item an axis tick stands for: only whole ticks, at bar centres, get a label.
fn at_whole<T>(x: f64, items: &[T]) -> Option<&T> {
    let index = x.round();
    if (x - index).abs() > 1e-6 || index < 0.0 {
        return None;
    }
    items.get(index as usize)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// One plot as an SVG string; a drawing error becomes a line of text.
fn svg(draw: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult) -> String {
    let mut out = String::new();
    let outcome = {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let filled = root.fill(&WHITE).map_err(|e| e.to_string());
        filled
            .map_err(Into::into)
            .and_then(|()| draw(root.clone()))
            .and_then(|()| root.present().map_err(Into::into))
    };
    match outcome {
        Ok(()) => out,
        Err(error) => format!("<p>plot failed: {}</p>", escape(&error.to_string())),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn micros(us: u64) -> String {
    match us {
        us if us >= 1_000_000 => format!("{} s", us / 1_000_000),
        us if us >= 1000 => format!("{} ms", us / 1000),
        us => format!("{us} µs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_trace_still_makes_a_page() {
        let engine = crate::engine::Engine::new(Vec::new(), Default::default());
        let report = crate::frontend::session::report(
            &engine,
            Default::default(),
            std::time::Duration::ZERO,
            Vec::new(),
            false,
        );
        let series = super::super::Collector::default().finish(&|_| None);
        let html = page(&report, &series, &[], "empty <file>");
        assert!(html.contains("No sizes were recorded"));
        assert!(html.contains("No device commands were recorded"));
        assert!(html.contains("empty &lt;file&gt;"));
        assert!(!html.contains("plot failed"));
        assert!(html.ends_with("</html>\n"));
    }

    fn requeued_page() -> String {
        let report = crate::frontend::test_reports::requeued_report();
        let series = super::super::Collector::default().finish(&|_| None);
        page(&report, &series, &[], "vda.iotrace")
    }

    #[test]
    fn predictions_are_sentences_and_evidence_a_table_never_json() {
        let html = requeued_page();
        assert!(
            html.contains(
                "<p><b>What if:</b> the fix would take these writes from 593 device issues to ~527 (1.13x fewer); time not estimated</p>"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "<p><b>What if:</b> the workaround would take these writes from 593 device issues to ~357"
            ),
            "{html}"
        );
        assert!(
            html.contains("<tr><th>cause</th><td>virtio_ring_full</td></tr>"),
            "{html}"
        );
        assert!(html.contains("<tr><th>causes</th><td>max_sectors:700</td></tr>"));
        // The fix's second line is a line of its own.
        assert!(html.contains("shrink it to 65,536 sectors.<br>Or write with O_DIRECT"));
        assert!(
            !html.contains("{&quot;") && !html.contains("{\""),
            "JSON on the page"
        );
        assert!(
            !html.contains("<pre>") && !html.contains("what_if"),
            "{html}"
        );
    }

    #[test]
    fn measures_per_device_say_requeues_where_there_were_some() {
        let html = requeued_page();
        let at = html.find("<h2>Measures per device</h2>").unwrap();
        let measures = &html[at..];
        assert!(
            measures.contains("<h3 class=\"device\">vda</h3>"),
            "{measures}"
        );
        assert!(
            measures.contains(
                "<li>66 requeues for 527 commands (12.5%), waiting p50 440 µs / p99 2.1 ms before re-issue</li>"
            ),
            "{measures}"
        );
        assert_eq!(measures.matches("requeue").count(), 1, "{measures}");
        assert!(measures.contains(
            "<li>100 user I/Os split (100.0%), 700 splits in all, by cause: max_sectors 700</li>"
        ));
        // The idle partition has no heading; the header says the requeues.
        assert!(!measures.contains(">loop0p3<"), "{measures}");
        assert!(
            html.contains(
                " commands</p><p class=\"meta\">66 requeues (commands the driver gave back to be issued again; each counts once above)</p>"
            ),
            "{}",
            &html[..html.find("</p>").unwrap()]
        );
    }

    #[test]
    fn measures_per_device_say_failures_where_there_were_some() {
        let series = super::super::Collector::default().finish(&|_| None);
        let quiet = page(
            &crate::frontend::test_reports::seed_report(),
            &series,
            &[],
            "seed.iotrace",
        );
        assert!(!quiet.contains("failed"), "{quiet}");
        let report = crate::frontend::test_reports::failed_report();
        let html = page(&report, &series, &[], "sdf.iotrace");
        let at = html.find("<h2>Measures per device</h2>").unwrap();
        let measures = &html[at..];
        let sdf = measures.find("<h3 class=\"device\">sdf</h3>").unwrap();
        let said =
            "<li>3 of 527 write commands failed (EIO ×2, ETIMEDOUT ×1); 3 user I/Os failed</li>";
        assert!(measures[sdf..].contains(said), "{measures}");
        assert_eq!(measures.matches(" failed").count(), 2, "{measures}");
        assert!(html.contains("io_errors"), "the diagnosis is on the page");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn units() {
        let bytes = |value: u64| units::bytes_as(value as f64, BytesForm::Axis);
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(micros(2048), "2 ms");
    }
}
