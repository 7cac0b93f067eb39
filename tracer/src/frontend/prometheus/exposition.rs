//! Which exposition format a scrape gets, and the classic text format made
//! from the OpenMetrics text the encoder writes.
//!
//! As the Prometheus client libraries negotiate (client_golang's
//! `expfmt.NegotiateIncludingOpenMetrics`): the `Accept` header's media
//! ranges are tried by falling quality; the first that is OpenMetrics
//! (version 1.0.0, 0.0.1 or none) gets OpenMetrics, the first that is
//! `text/plain` (version 0.0.4 or none) or a wildcard gets the classic text
//! format, others (protobuf) are passed over; with none of these, or no
//! header, the classic text format.
//!
//! The classic form has the same samples under the same names. What only
//! OpenMetrics has is mapped as client_golang and client_python map it: a
//! counter's family takes its samples' `_total` name, an info family is a
//! gauge named `…_info`, stateset a gauge, unknown `untyped`, a gauge
//! histogram a histogram; `# UNIT` and `# EOF` lines, exemplars and
//! `_created` samples are left out, and timestamps go from seconds to
//! milliseconds.

/// `Content-Type` of the OpenMetrics answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the classic text answer.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    OpenMetrics,
    Text,
}

impl Exposition {
    /// The format for a request with this `Accept` header (None: no header).
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let Some(accept) = accept else {
            return Exposition::Text;
        };
        let mut ranges: Vec<(f64, String, Option<String>)> = accept
            .split(',')
            .filter_map(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next()?.to_ascii_lowercase();
                if media.is_empty() {
                    return None;
                }
                let mut quality = 1.0;
                let mut version = None;
                for param in parts {
                    let Some((key, value)) = param.split_once('=') else {
                        continue;
                    };
                    let value = value.trim().trim_matches('"');
                    match key.trim().to_ascii_lowercase().as_str() {
                        "q" => quality = value.parse().unwrap_or(0.0),
                        "version" => version = Some(value.to_string()),
                        _ => {}
                    }
                }
                Some((quality, media, version))
            })
            .collect();
        // Stable: equal qualities keep the header's order.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (quality, media, version) in ranges {
            if quality <= 0.0 {
                continue;
            }
            let version = version.as_deref().unwrap_or("");
            match media.as_str() {
                "application/openmetrics-text" if ["", "1.0.0", "0.0.1"].contains(&version) => {
                    return Exposition::OpenMetrics;
                }
                "text/plain" if ["", "0.0.4"].contains(&version) => return Exposition::Text,
                "*/*" | "text/*" => return Exposition::Text,
                _ => {}
            }
        }
        Exposition::Text
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => OPENMETRICS,
            Exposition::Text => TEXT,
        }
    }
}

/// The classic text format (0.0.4) of an OpenMetrics text exposition.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The family's HELP line waits for its TYPE, which may rename it.
    let mut help: Option<(&str, &str)> = None;
    // The current family's OpenMetrics type.
    let mut kind = "";
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, om_kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            kind = om_kind;
            let (classic_name, classic_kind) = match om_kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_string(), "gauge"),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            if let Some((help_name, text)) = help.take() {
                if help_name == name {
                    out.push_str("# HELP ");
                    out.push_str(&classic_name);
                    out.push(' ');
                    out.push_str(text);
                    out.push('\n');
                } else {
                    flush_help(&mut out, Some((help_name, text)));
                }
            }
            out.push_str("# TYPE ");
            out.push_str(&classic_name);
            out.push(' ');
            out.push_str(classic_kind);
            out.push('\n');
        } else if line.starts_with('#') || line.is_empty() {
            // # UNIT, # EOF and other comments: not in the classic format.
        } else if let Some(sample) = classic_sample(line, kind) {
            flush_help(&mut out, help.take());
            out.push_str(&sample);
            out.push('\n');
        }
    }
    flush_help(&mut out, help);
    out
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
}

/// One sample line in the classic format, or None for one it has no place
/// for (`_created`).
fn classic_sample(line: &str, kind: &str) -> Option<String> {
    // Exemplars follow " # " after the value: outside any label value,
    // since the labels end at the last '}' before them.
    let (series, rest) = split_series(line);
    let name = series.split('{').next().unwrap_or(series);
    if name.ends_with("_created") && ["counter", "histogram", "summary"].contains(&kind) {
        return None;
    }
    let rest = rest.split(" # ").next().unwrap_or(rest);
    let mut words = rest.split_whitespace();
    let value = words.next()?;
    let series = if kind == "gaugehistogram" {
        rename_suffix(series, &[("_gcount", "_count"), ("_gsum", "_sum")])
    } else {
        series.to_string()
    };
    Some(match words.next() {
        // OpenMetrics timestamps are seconds; classic ones milliseconds.
        Some(seconds) => match seconds.parse::<f64>() {
            Ok(seconds) => format!("{series} {value} {}", (seconds * 1000.0).round() as i64),
            Err(_) => format!("{series} {value}"),
        },
        None => format!("{series} {value}"),
    })
}

/// The series (name and labels) and what follows it, split at the space
/// after the labels' closing brace (quoted label values may hold spaces and
/// braces).
fn split_series(line: &str) -> (&str, &str) {
    let mut quoted = false;
    let mut escaped = false;
    let mut in_labels = false;
    for (index, byte) in line.bytes().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' if quoted => escaped = true,
            b'"' if in_labels => quoted = !quoted,
            b'{' if !quoted => in_labels = true,
            b'}' if !quoted => in_labels = false,
            b' ' if !quoted && !in_labels => return (&line[..index], &line[index + 1..]),
            _ => {}
        }
    }
    (line, "")
}

fn rename_suffix(series: &str, renames: &[(&str, &str)]) -> String {
    let (name, labels) = match series.find('{') {
        Some(at) => series.split_at(at),
        None => (series, ""),
    };
    for (from, to) in renames {
        if let Some(stem) = name.strip_suffix(from) {
            return format!("{stem}{to}{labels}");
        }
    }
    series.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_text_format() {
        // Prometheus 2.x's scrape Accept header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            Exposition::negotiate(Some(prometheus)),
            Exposition::OpenMetrics
        );
        assert_eq!(
            Exposition::negotiate(Some("application/openmetrics-text")),
            Exposition::OpenMetrics
        );
        for text in [
            None,
            Some("*/*"),
            Some(""),
            Some("text/plain;version=0.0.4"),
            Some("text/plain; version=0.0.4; charset=utf-8"),
            // The text format preferred by quality.
            Some("application/openmetrics-text;q=0.5,text/plain;version=0.0.4"),
            // An OpenMetrics version this encoder does not write.
            Some("application/openmetrics-text;version=2.0.0"),
            // Protobuf is not served: the default.
            Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"),
            Some("application/openmetrics-text;q=0"),
        ] {
            assert_eq!(Exposition::negotiate(text), Exposition::Text, "{text:?}");
        }
        assert_eq!(Exposition::Text.content_type(), TEXT);
    }

    #[test]
    fn openmetrics_only_types_are_mapped_as_the_client_libraries_do() {
        let om = "\
# HELP iosplit_commands Device commands.
# TYPE iosplit_commands counter
iosplit_commands_total{device=\"sda\",op=\"write\"} 12
iosplit_commands_created{device=\"sda\",op=\"write\"} 1700000000.5
# HELP iosplit_build The build.
# TYPE iosplit_build info
iosplit_build_info{version=\"0.1.0\"} 1
# HELP iosplit_mystery Who knows.
# TYPE iosplit_mystery unknown
iosplit_mystery 3 1700000000.25
# HELP iosplit_size_bytes Sizes.
# TYPE iosplit_size_bytes histogram
# UNIT iosplit_size_bytes bytes
iosplit_size_bytes_bucket{le=\"511.0\"} 1 # {trace_id=\"a b\"} 300.0
iosplit_size_bytes_bucket{le=\"+Inf\"} 2
iosplit_size_bytes_sum 1024.0
iosplit_size_bytes_count 2
# HELP iosplit_owner Odd owners.
# TYPE iosplit_owner gauge
iosplit_owner{owner=\"a } b \\\" c\"} 1
# EOF
";
        let expected = "\
# HELP iosplit_commands_total Device commands.
# TYPE iosplit_commands_total counter
iosplit_commands_total{device=\"sda\",op=\"write\"} 12
# HELP iosplit_build_info The build.
# TYPE iosplit_build_info gauge
iosplit_build_info{version=\"0.1.0\"} 1
# HELP iosplit_mystery Who knows.
# TYPE iosplit_mystery untyped
iosplit_mystery 3 1700000000250
# HELP iosplit_size_bytes Sizes.
# TYPE iosplit_size_bytes histogram
iosplit_size_bytes_bucket{le=\"511.0\"} 1
iosplit_size_bytes_bucket{le=\"+Inf\"} 2
iosplit_size_bytes_sum 1024.0
iosplit_size_bytes_count 2
# HELP iosplit_owner Odd owners.
# TYPE iosplit_owner gauge
iosplit_owner{owner=\"a } b \\\" c\"} 1
";
        assert_eq!(to_text_format(om), expected);
    }
}
