//! Human-friendly numbers shared by the text report and the TUI.
//!
//! Long forms (`16,385`, `64 KiB`, `1.2 ms`) are for the report; compact forms
//! (`16k`, `64K`, `1.2ms`) fit the TUI's narrow table columns.

use std::time::Duration;

const KIB: f64 = 1024.0;
const BINARY_UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
const COMPACT_UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];

/// `16385` → `16,385`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// Splits a byte count into a value below 1024 (unless the largest of
/// `units` units is reached) and a unit index (`None`: bytes).
fn scale_bytes(bytes: f64, units: usize) -> (f64, Option<usize>) {
    if !bytes.is_finite() || bytes < KIB {
        return (bytes, None);
    }
    let mut value = bytes;
    let mut unit = 0;
    value /= KIB;
    while value >= KIB && unit + 1 < units {
        value /= KIB;
        unit += 1;
    }
    (value, Some(unit))
}

/// One decimal below 100 unless the value is whole: `64`, `63.5`, `1.2`, `512`.
fn short_decimal(value: f64) -> String {
    if (value - value.round()).abs() < 0.05 || value >= 99.95 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// How a byte count is written. Each view keeps the form it has always
/// printed; [`bytes_as`] writes them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BytesForm {
    /// `512 B`, `64 KiB`, `63.5 KiB`: a decimal only when the value is not
    /// whole, up to PiB. The report, the TUI and the words.
    Short,
    /// `100 B`, `20.0 GiB`: always one decimal, up to TiB. `check`'s table.
    Tenths,
    /// `512 B`, `3 KiB` (whole KiB, rounded down), `1.5 MiB`, `2 GiB` or
    /// `2.5 GiB`, up to GiB. The HTML page's plots and captions.
    Axis,
}

impl BytesForm {
    /// How many of [`BINARY_UNITS`] the form climbs.
    fn units(self) -> usize {
        match self {
            BytesForm::Short => BINARY_UNITS.len(),
            BytesForm::Tenths => 4,
            BytesForm::Axis => 3,
        }
    }

    /// `value` (below 1024 unless in the largest unit) of `BINARY_UNITS[unit]`.
    fn number(self, value: f64, unit: usize) -> String {
        match (self, unit) {
            (BytesForm::Short, _) => short_decimal(value),
            (BytesForm::Tenths, _) => format!("{value:.1}"),
            (BytesForm::Axis, 0) => format!("{:.0}", value.floor()),
            (BytesForm::Axis, 2) if value.fract() == 0.0 => format!("{value:.0}"),
            (BytesForm::Axis, _) => format!("{value:.1}"),
        }
    }
}

/// `512` → `512 B`, `65536` → `64 KiB`, `65024` → `63.5 KiB`.
pub fn bytes(value: f64) -> String {
    bytes_as(value, BytesForm::Short)
}

/// A byte count in a binary unit, written in `form`; below 1 KiB, whole bytes.
pub fn bytes_as(value: f64, form: BytesForm) -> String {
    match scale_bytes(value.max(0.0), form.units()) {
        (value, None) => format!("{value:.0} B"),
        (value, Some(unit)) => format!("{} {}", form.number(value, unit), BINARY_UNITS[unit]),
    }
}

/// Compact byte count for table cells: `512B`, `4K`, `63.5K`, `1M`.
pub fn compact_bytes(value: f64) -> String {
    match scale_bytes(value.max(0.0), COMPACT_UNITS.len()) {
        (value, None) => format!("{value:.0}B"),
        (value, Some(unit)) => format!("{}{}", short_decimal(value), COMPACT_UNITS[unit]),
    }
}

/// Label of a log2 bucket starting at `low` bytes: `512B`, `1K`, `64K`, `1M`.
pub fn bucket_label(low: u64) -> String {
    compact_bytes(low as f64)
}

/// A count or rate in at most five characters: `0`, `12`, `999`, `1.2k`, `16k`, `1.2M`.
pub fn compact_count(value: f64) -> String {
    let value = if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    };
    if value < 1000.0 {
        // Rates below 10/s keep a decimal so a trickle is not shown as 0.
        if value > 0.0 && value < 10.0 && value.fract() != 0.0 {
            return format!("{value:.1}");
        }
        return format!("{value:.0}");
    }
    let (scaled, suffix) = if value < 1e6 {
        (value / 1e3, "k")
    } else if value < 1e9 {
        (value / 1e6, "M")
    } else {
        (value / 1e9, "G")
    };
    // 9.96 would print as "10.0": switch to whole numbers where rounding does.
    if scaled < 9.95 {
        format!("{scaled:.1}{suffix}")
    } else {
        format!("{scaled:.0}{suffix}")
    }
}

/// A latency in microseconds: `850 µs`, `1.2 ms`, `12 ms`, `1.5 s`.
pub fn micros(us: u64) -> String {
    let (value, unit) = scale_micros(us);
    format!("{value} {unit}")
}

/// A latency in microseconds without the space: `850µs`, `1.2ms`.
pub fn compact_micros(us: u64) -> String {
    let (value, unit) = scale_micros(us);
    format!("{value}{unit}")
}

fn scale_micros(us: u64) -> (String, &'static str) {
    if us < 1000 {
        (us.to_string(), "µs")
    } else if us < 1_000_000 {
        (short_decimal(us as f64 / 1e3), "ms")
    } else {
        (short_decimal(us as f64 / 1e6), "s")
    }
}

/// A share in 0..=1 as a percentage: `99.2%`.
pub fn percent(share: f64) -> String {
    let share = if share.is_finite() { share } else { 0.0 };
    format!("{:.1}%", share * 100.0)
}

/// A ratio with about three significant digits: `0.008`, `0.25`, `1.5`, `12.7`, `128`.
pub fn ratio(value: f64) -> String {
    let value = if value.is_finite() { value } else { 0.0 };
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".to_string()
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 0.1 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// Seconds of tracing: `0.5 s`, `12.3 s`, `2 min 5 s`.
pub fn seconds(value: f64) -> String {
    let value = if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    };
    if value < 60.0 {
        format!("{value:.1} s")
    } else {
        let whole = value.round() as u64;
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// An uptime as `h:mm:ss` (or `m:ss` below an hour).
pub fn clock(uptime: Duration) -> String {
    let total = uptime.as_secs();
    let (hours, minutes, secs) = (total / 3600, (total / 60) % 60, total % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{secs:02}")
    } else {
        format!("{minutes}:{secs:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(16385), "16,385");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1024.0), "1 KiB");
        assert_eq!(bytes(65536.0), "64 KiB");
        assert_eq!(bytes(65024.0), "63.5 KiB");
        assert_eq!(bytes(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(-3.0), "0 B");
    }

    /// The forms differ where the views always did; one function writes each.
    #[test]
    fn each_view_keeps_its_form_of_bytes() {
        let said = |value: f64| {
            [BytesForm::Short, BytesForm::Tenths, BytesForm::Axis].map(|form| bytes_as(value, form))
        };
        assert_eq!(said(100.0), ["100 B", "100 B", "100 B"]);
        assert_eq!(said(4096.0), ["4 KiB", "4.0 KiB", "4 KiB"]);
        assert_eq!(said(1536.0), ["1.5 KiB", "1.5 KiB", "1 KiB"]);
        assert_eq!(said(1048576.0), ["1 MiB", "1.0 MiB", "1.0 MiB"]);
        assert_eq!(said(41_943_040.0 * 512.0), ["20 GiB", "20.0 GiB", "20 GiB"]);
        assert_eq!(said(f64::from(u32::MAX)), ["4 GiB", "4.0 GiB", "4.0 GiB"]);
        assert_eq!(
            said(3.0 * 1024f64.powi(4)),
            ["3 TiB", "3.0 TiB", "3072 GiB"]
        );
        assert_eq!(
            said(2.0 * 1024f64.powi(5)),
            ["2 PiB", "2048.0 TiB", "2097152 GiB"]
        );
    }

    #[test]
    fn compact_forms_fit_table_cells() {
        assert_eq!(compact_bytes(512.0), "512B");
        assert_eq!(compact_bytes(4096.0), "4K");
        assert_eq!(bucket_label(1 << 20), "1M");
        assert_eq!(bucket_label(1 << 30), "1G");
        assert_eq!(compact_count(0.0), "0");
        assert_eq!(compact_count(0.5), "0.5");
        assert_eq!(compact_count(999.0), "999");
        assert_eq!(compact_count(16385.0), "16k");
        assert_eq!(compact_count(1234.0), "1.2k");
        assert_eq!(compact_count(9990.0), "10k");
        assert_eq!(compact_bytes(99.97 * 1024.0), "100K");
        assert_eq!(compact_count(2.5e6), "2.5M");
        assert_eq!(compact_count(f64::NAN), "0");
    }

    #[test]
    fn latencies_pick_a_unit() {
        assert_eq!(micros(850), "850 µs");
        assert_eq!(micros(1200), "1.2 ms");
        assert_eq!(micros(12_000), "12 ms");
        assert_eq!(micros(1_500_000), "1.5 s");
        assert_eq!(compact_micros(1200), "1.2ms");
    }

    #[test]
    fn ratios_and_percentages() {
        assert_eq!(percent(0.992), "99.2%");
        assert_eq!(percent(f64::INFINITY), "0.0%");
        assert_eq!(ratio(129.0 / 16385.0), "0.008");
        assert_eq!(ratio(1.5), "1.50");
        assert_eq!(ratio(16.0), "16.0");
        assert_eq!(ratio(128.0), "128");
        assert_eq!(ratio(0.0), "0");
    }

    #[test]
    fn durations() {
        assert_eq!(seconds(12.34), "12.3 s");
        assert_eq!(seconds(125.0), "2 min 5 s");
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
    }
}
