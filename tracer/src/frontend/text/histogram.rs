//! Side-by-side log2 size histograms of user I/Os and commands: the
//! report's, under each op, and the TUI's detail pane.

use std::collections::BTreeSet;

use unicode_width::UnicodeWidthStr;

use crate::frontend::units;
use crate::model::Distribution;

/// Longest histogram bar, so wide terminals do not stretch the bars absurdly.
const MAX_BAR: usize = 32;
/// Histograms fill empty buckets between the smallest and largest size up to this many rows.
const MAX_FILLED_ROWS: usize = 24;

/// Side-by-side log2 histograms of user I/O size and command size, each bar
/// scaled to its own column's largest bucket. Lines start with `indent` and
/// fit `width` columns.
pub fn size_histogram(
    user: &Distribution,
    commands: &Distribution,
    indent: &str,
    width: usize,
) -> Vec<String> {
    let lows = histogram_rows(user, commands);
    if lows.is_empty() {
        return Vec::new();
    }
    let count_at = |dist: &Distribution, low: u64| {
        dist.buckets
            .iter()
            .filter(|bucket| bucket.low == low)
            .map(|bucket| bucket.count)
            .sum::<u64>()
    };
    let all_rows: Vec<(String, u64, u64)> = lows
        .iter()
        .map(|&low| {
            (
                units::bucket_label(low),
                count_at(user, low),
                count_at(commands, low),
            )
        })
        .collect();
    let rows = collapse_empty_runs(all_rows);
    let label_width = rows
        .iter()
        .map(|(label, _, _)| label.len())
        .max()
        .unwrap_or(0)
        .max("size".len());
    let count_width = |pick: fn(&(String, u64, u64)) -> u64| {
        rows.iter()
            .map(|row| units::thousands(pick(row)).len())
            .max()
            .unwrap_or(1)
    };
    let user_width = count_width(|row| row.1);
    let command_width = count_width(|row| row.2);
    let fixed = indent.width() + label_width + 2 + user_width + 1 + 2 + command_width + 1;
    let bar = (width.saturating_sub(fixed) / 2).clamp(1, MAX_BAR);
    let user_max = rows.iter().map(|row| row.1).max().unwrap_or(0);
    let command_max = rows.iter().map(|row| row.2).max().unwrap_or(0);

    let user_column = user_width + 1 + bar;
    let mut lines = vec![format!(
        "{indent}{:<label_width$}  {:<user_column$}  commands",
        "size", "user I/Os"
    )];
    for (label, user_count, command_count) in &rows {
        if label == GAP {
            lines.push(format!("{indent}{GAP}"));
            continue;
        }
        let line = format!(
            "{indent}{label:<label_width$}  {:>user_width$} {:<bar$}  {:>command_width$} {}",
            units::thousands(*user_count),
            bar_of(*user_count, user_max, bar),
            units::thousands(*command_count),
            bar_of(*command_count, command_max, bar),
        );
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Bucket lows shown: every bucket seen, plus the empty powers of two between
/// them so the distance between sizes is visible.
fn histogram_rows(user: &Distribution, commands: &Distribution) -> Vec<u64> {
    let seen: BTreeSet<u64> = user
        .buckets
        .iter()
        .chain(&commands.buckets)
        .filter(|bucket| bucket.count > 0)
        .map(|bucket| bucket.low)
        .collect();
    let (Some(&first), Some(&last)) = (seen.iter().find(|&&low| low > 0), seen.last()) else {
        return seen.into_iter().collect();
    };
    let all_powers = seen.iter().all(|&low| low == 0 || low.is_power_of_two());
    let span = (last.trailing_zeros() - first.trailing_zeros()) as usize + 1;
    if !all_powers || span > MAX_FILLED_ROWS {
        return seen.into_iter().collect();
    }
    let mut rows: Vec<u64> = seen.iter().copied().filter(|&low| low == 0).collect();
    let mut low = first;
    while low <= last {
        rows.push(low);
        match low.checked_mul(2) {
            Some(next) => low = next,
            None => break,
        }
    }
    rows
}

/// Label of a row standing for several empty buckets.
const GAP: &str = "…";
/// Longer runs of empty buckets than this are shown as one [`GAP`] row.
const MAX_EMPTY_RUN: usize = 2;

/// Keeps the histogram short: a run of more than [`MAX_EMPTY_RUN`] empty
/// buckets between sizes becomes a single `…` row.
fn collapse_empty_runs(rows: Vec<(String, u64, u64)>) -> Vec<(String, u64, u64)> {
    let mut kept: Vec<(String, u64, u64)> = Vec::with_capacity(rows.len());
    let mut empty_run: Vec<(String, u64, u64)> = Vec::new();
    for row in rows {
        if row.1 == 0 && row.2 == 0 {
            empty_run.push(row);
            continue;
        }
        if empty_run.len() > MAX_EMPTY_RUN {
            kept.push((GAP.to_string(), 0, 0));
            empty_run.clear();
        }
        kept.append(&mut empty_run);
        kept.push(row);
    }
    kept
}

fn bar_of(count: u64, max: u64, width: usize) -> String {
    if count == 0 || max == 0 {
        return String::new();
    }
    // Round up so a single non-zero bucket is never invisible.
    let cells = ((count as f64 / max as f64) * width as f64).ceil() as usize;
    "█".repeat(cells.clamp(1, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::distribution;

    #[test]
    fn histogram_puts_user_ios_and_commands_side_by_side() {
        let user = distribution(&[(512, 16385)]);
        let commands = distribution(&[(512, 1), (65536, 128)]);
        let lines = size_histogram(&user, &commands, "  ", 80);
        assert!(lines[0].contains("size") && lines[0].contains("user I/Os"));
        assert!(lines[0].contains("commands"));
        // 512B, a gap row for the six empty sizes 1K..32K, 64K, plus the header.
        assert_eq!(lines.len(), 1 + 3, "{lines:#?}");
        assert_eq!(lines[2].trim(), "…");
        let row_512 = &lines[1];
        assert!(row_512.trim_start().starts_with("512B"));
        assert!(row_512.contains("16,385 █"));
        let row_64k = lines
            .iter()
            .find(|l| l.trim_start().starts_with("64K"))
            .unwrap();
        assert!(row_64k.contains(" 0 "), "{row_64k}");
        for line in &lines {
            assert!(line.width() <= 80);
        }
        // Each side is scaled to its own largest bucket: 16,385 user I/Os and
        // 128 commands both get the full bar; the single 512 B command one cell.
        let full = row_64k.matches('█').count();
        assert!((10..=MAX_BAR).contains(&full), "bar of {full} cells");
        assert_eq!(row_512.matches('█').count(), full + 1);
        assert!(row_512.ends_with("  1 █"), "{row_512}");
        assert!(row_64k.ends_with(&format!("128 {}", "█".repeat(full))));
    }

    #[test]
    fn histogram_keeps_short_gaps_and_fills_missing_powers() {
        let user = distribution(&[(4096, 10), (16384, 5)]);
        let commands = distribution(&[(4096, 3)]);
        let lines = size_histogram(&user, &commands, "", 80);
        let labels: Vec<&str> = lines[1..]
            .iter()
            .map(|line| line.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(labels, vec!["4K", "8K", "16K"]);
        assert!(lines[2].contains(" 0 ") && !lines[2].contains('█'));
    }

    #[test]
    fn histogram_of_nothing_is_empty() {
        let none = Distribution::default();
        assert!(size_histogram(&none, &none, "", 80).is_empty());
    }
}
