//! The Prometheus exposition that `serve` and `check --prometheus` write.
//! Metric families are written as OpenMetrics text by one writer
//! ([`openmetrics`]). The classic text format (0.0.4) is made from that text
//! ([`classic_text`], [`exposition::to_text_format`]), and
//! [`exposition::Exposition`] says which of the two a scraper gets.
//!
//! The writer writes what `prometheus-client`'s encoder wrote before it: the
//! fixtures in tests/fixtures/prometheus/ hold both commands to those bytes.
//! - HELP and TYPE lines as given (help texts are not escaped).
//! - Label values with `\`, `"` and newlines escaped.
//! - A counter's samples under its `_total` name, an info family's as
//!   `_info … 1`.
//! - A histogram as `_sum`, `_count`, then cumulative `_bucket`s with `le`
//!   first.
//! - `# EOF` last.

pub mod exposition;

use std::fmt::Write as _;

/// A sample's labels, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// A family's type, as its TYPE line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Info,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Info => "info",
        }
    }
}

/// One sample's value, and so how it is written.
#[derive(Debug)]
pub enum Value {
    /// A counter: an integer.
    Counter(u64),
    /// A counter of seconds (CPU time).
    Seconds(f64),
    /// A gauge, written as the Prometheus client libraries write floats
    /// (`7.0`, `0.25`).
    Gauge(f64),
    /// A gauge written as the shortest decimal that reads back as it, with
    /// no fraction when whole (`1`, `2048`, `1800000000.25`): the form of
    /// `check`'s textfile.
    Decimal(f64),
    /// `buckets` are (upper bound, count in that bucket alone), ending in
    /// +Inf; they are written cumulative.
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
    /// An info family's sample: its labels, and 1.
    Info,
}

/// A metric family: described even when it has no samples.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<(Labels, Value)>,
}

impl Family {
    pub fn new(
        name: &'static str,
        help: &'static str,
        kind: Kind,
        samples: Vec<(Labels, Value)>,
    ) -> Family {
        Family {
            name,
            help,
            kind,
            samples,
        }
    }
}

/// The families as an OpenMetrics text exposition, `# EOF` included.
pub fn openmetrics(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families {
        write_family(&mut out, family);
    }
    out.push_str("# EOF\n");
    out
}

/// The families in the classic text format (0.0.4).
pub fn classic_text(families: &[Family]) -> String {
    exposition::to_text_format(&openmetrics(families))
}

fn write_family(out: &mut String, family: &Family) {
    let name = family.name;
    let _ = writeln!(out, "# HELP {name} {}", family.help);
    let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
    for (labels, value) in &family.samples {
        match value {
            Value::Counter(count) => sample(out, name, "_total", None, labels, count),
            Value::Seconds(seconds) => sample(out, name, "_total", None, labels, Float(*seconds)),
            Value::Gauge(gauge) => sample(out, name, "", None, labels, Float(*gauge)),
            Value::Decimal(value) => sample(out, name, "", None, labels, value),
            Value::Info => sample(out, name, "_info", None, labels, 1),
            Value::Histogram {
                sum,
                count,
                buckets,
            } => {
                sample(out, name, "_sum", None, labels, Float(*sum));
                sample(out, name, "_count", None, labels, count);
                let mut cumulative: u64 = 0;
                for &(upper, in_bucket) in buckets {
                    cumulative = cumulative.saturating_add(in_bucket);
                    sample(out, name, "_bucket", Some(upper), labels, cumulative);
                }
            }
        }
    }
}

/// One sample line: the name and suffix, a bucket's `le` before the
/// labels, and the value.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    le: Option<f64>,
    labels: &Labels,
    value: impl std::fmt::Display,
) {
    out.push_str(name);
    out.push_str(suffix);
    let mut separator = '{';
    if let Some(le) = le {
        let _ = match le == f64::INFINITY {
            true => write!(out, "{separator}le=\"+Inf\""),
            false => write!(out, "{separator}le=\"{}\"", Float(le)),
        };
        separator = ',';
    }
    for (key, label) in labels {
        let _ = write!(out, "{separator}{key}=\"");
        escape_label_value(out, label);
        out.push('"');
        separator = ',';
    }
    if separator == ',' {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value with backslash, double quote and newline escaped.
fn escape_label_value(out: &mut String, value: &str) {
    for character in value.chars() {
        match character {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
}

/// A float as the Prometheus client libraries write it: with a fraction or
/// an exponent even when whole (`7.0`, `1e-7`).
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(dtoa::Buffer::new().format(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_is_written_as_the_client_libraries_write_it() {
        let families = [
            Family::new(
                "a_histogram",
                "Sizes.",
                Kind::Histogram,
                vec![(
                    Labels::new(),
                    Value::Histogram {
                        sum: 3.0,
                        count: 3,
                        buckets: vec![(0.5, 1), (1e-7, 0), (f64::INFINITY, 2)],
                    },
                )],
            ),
            Family::new(
                "a_gauge",
                "Odd labels.",
                Kind::Gauge,
                vec![
                    (vec![("who", "a\"b\\c\nd".to_string())], Value::Gauge(7.0)),
                    (Labels::new(), Value::Decimal(7.0)),
                    (Labels::new(), Value::Decimal(0.25)),
                ],
            ),
            Family::new("none_yet", "Described.", Kind::Counter, Vec::new()),
        ];
        let expected = "\
# HELP a_histogram Sizes.
# TYPE a_histogram histogram
a_histogram_sum 3.0
a_histogram_count 3
a_histogram_bucket{le=\"0.5\"} 1
a_histogram_bucket{le=\"1e-7\"} 1
a_histogram_bucket{le=\"+Inf\"} 3
# HELP a_gauge Odd labels.
# TYPE a_gauge gauge
a_gauge{who=\"a\\\"b\\\\c\\nd\"} 7.0
a_gauge 7
a_gauge 0.25
# HELP none_yet Described.
# TYPE none_yet counter
# EOF
";
        assert_eq!(openmetrics(&families), expected);
        assert!(classic_text(&families).contains("# TYPE none_yet_total counter\n"));
    }
}
