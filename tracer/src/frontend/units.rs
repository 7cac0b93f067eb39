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

/// Splits a byte count into a value below 1024 and a unit index (`None`: bytes).
fn scale_bytes(bytes: f64) -> (f64, Option<usize>) {
    if !bytes.is_finite() || bytes < KIB {
        return (bytes, None);
    }
    let mut value = bytes;
    let mut unit = 0;
    value /= KIB;
    while value >= KIB && unit + 1 < BINARY_UNITS.len() {
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

/// `512` → `512 B`, `65536` → `64 KiB`, `65024` → `63.5 KiB`.
pub fn bytes(value: f64) -> String {
    match scale_bytes(value.max(0.0)) {
        (value, None) => format!("{value:.0} B"),
        (value, Some(unit)) => format!("{} {}", short_decimal(value), BINARY_UNITS[unit]),
    }
}

/// Compact byte count for table cells: `512B`, `4K`, `63.5K`, `1M`.
pub fn compact_bytes(value: f64) -> String {
    match scale_bytes(value.max(0.0)) {
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
