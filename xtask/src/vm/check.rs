//! Reading what a guest left in its results directory, and turning it into
//! checks: expected vs found, pass or fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::oracle;

/// One line of the final table.
#[derive(Clone, Debug)]
pub struct Check {
    pub what: String,
    pub expected: String,
    pub found: String,
    pub pass: bool,
}

impl Check {
    pub fn new(
        what: impl Into<String>,
        expected: impl Into<String>,
        found: impl Into<String>,
        pass: bool,
    ) -> Check {
        Check {
            what: what.into(),
            expected: expected.into(),
            found: found.into(),
            pass,
        }
    }

    /// A check that could not be made because a result is missing or broken.
    pub fn missing(what: impl Into<String>, expected: impl Into<String>, why: String) -> Check {
        Check::new(what, expected, why, false)
    }
}

/// The results directory of one boot.
pub struct Results<'a> {
    pub dir: &'a Path,
}

impl Results<'_> {
    pub fn text(&self, name: &str) -> Result<String, String> {
        std::fs::read_to_string(self.dir.join(name)).map_err(|_| format!("no {name}"))
    }

    /// A `key=value` file.
    pub fn values(&self, name: &str) -> Result<BTreeMap<String, String>, String> {
        Ok(parse_values(&self.text(name)?))
    }

    /// One value from a `key=value` file.
    pub fn value(&self, name: &str, key: &str) -> Result<String, String> {
        self.values(name)?
            .remove(key)
            .ok_or_else(|| format!("{name} has no {key}"))
    }

    /// A JSON document written by iosplit-trace; the error names the file and
    /// quotes the tool's stderr, which says why it is missing.
    pub fn json(&self, name: &str) -> Result<Value, String> {
        let stderr = self.text(&format!("{name}.stderr")).unwrap_or_default();
        // The last line the tool wrote (`+ ` lines are the guest shell's trace).
        let reason = stderr
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty() && !line.starts_with("+ "))
            .unwrap_or("")
            .to_string();
        let text = self.text(name).map_err(|why| format!("{why}: {reason}"))?;
        serde_json::from_str(&text).map_err(|_| {
            if text.trim().is_empty() {
                format!("{name} empty: {reason}")
            } else {
                format!("{name} is not JSON: {reason}")
            }
        })
    }
}

pub fn parse_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect()
}

/// A diagnosis as the checks see it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    pub code: String,
    pub block_size: Option<u64>,
    pub cause: Option<String>,
    /// The cause or the explanation names the virt boundary.
    pub names_virt_boundary: bool,
    pub severity: String,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(size) = self.block_size {
            write!(f, "(bs {size})")?;
        }
        if let Some(cause) = &self.cause {
            write!(f, "(cause {cause})")?;
        } else if self.names_virt_boundary {
            write!(f, "(virt boundary)")?;
        }
        Ok(())
    }
}

/// Diagnoses on `device` in a report's top-level `diagnoses` list.
pub fn diagnoses_on(report: &Value, device: &str) -> Vec<Found> {
    let mut found: Vec<Found> = report
        .get("diagnoses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|diagnosis| {
            diagnosis
                .get("device")
                .and_then(Value::as_str)
                .is_some_and(|name| name.trim_start_matches("/dev/") == device)
        })
        .map(|diagnosis| {
            let evidence = diagnosis.get("evidence");
            let text =
                |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or("").to_lowercase();
            let cause = text(evidence.and_then(|e| e.get("cause")));
            let explanation = text(diagnosis.get("explanation"));
            Found {
                severity: text(diagnosis.get("severity")),
                names_virt_boundary: cause.contains("virt_boundary")
                    || explanation.contains("virt boundary")
                    || explanation.contains("virt_boundary"),
                code: diagnosis
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string(),
                block_size: evidence
                    .and_then(|e| e.get("block_size"))
                    .and_then(Value::as_u64),
                cause: evidence
                    .and_then(|e| e.get("cause"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }
        })
        .collect();
    found.sort();
    found
}

pub fn describe(found: &[Found]) -> String {
    if found.is_empty() {
        "none".to_string()
    } else {
        found
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A healthy device: no diagnosis on it above `info` (the false-alarm rule).
pub fn expect_no_warning(what: &str, report: &Result<Value, String>, device: &str) -> Check {
    let expected = "no warning or critical (info allowed)";
    let report = match report {
        Ok(report) => report,
        Err(why) => return Check::missing(what, expected, why.clone()),
    };
    let found = diagnoses_on(report, device);
    let loud: Vec<String> = found
        .iter()
        .filter(|f| f.severity != "info")
        .map(|f| format!("{f} {}", f.severity))
        .collect();
    Check::new(
        what,
        expected,
        format!(
            "{device}: {}; above info: [{}]",
            describe(&found),
            loud.join(", ")
        ),
        loud.is_empty(),
    )
}

/// Expected diagnoses on one device, compared as an exact set of codes, plus
/// the block size for `subpage_block_size` when given.
pub fn expect_diagnoses(
    what: &str,
    report: &Result<Value, String>,
    device: &str,
    codes: &[&str],
    block_size: Option<u64>,
) -> Check {
    let mut expected = if codes.is_empty() {
        "none".to_string()
    } else {
        codes.join(", ")
    };
    if let Some(size) = block_size {
        expected.push_str(&format!(" (bs {size})"));
    }
    let report = match report {
        Ok(report) => report,
        Err(why) => return Check::missing(what, expected, why.clone()),
    };
    let found = diagnoses_on(report, device);
    let found_codes: BTreeSet<&str> = found.iter().map(|f| f.code.as_str()).collect();
    let wanted: BTreeSet<&str> = codes.iter().copied().collect();
    let size_ok = block_size.is_none_or(|size| {
        found
            .iter()
            .any(|f| f.code == "subpage_block_size" && f.block_size == Some(size))
    });
    Check::new(
        what,
        expected,
        format!("{device}: {}", describe(&found)),
        found_codes == wanted && size_ok,
    )
}

/// The tool's event counts against the blk tracer's, for the same window.
pub fn expect_oracle_agreement(
    what: &str,
    results: &Results,
    report_name: &str,
    trace_name: &str,
) -> Check {
    let expected = "A Q X M F D R C equal (but for declared misses), no overrun";
    let report = match results.json(report_name) {
        Ok(report) => report,
        Err(why) => return Check::missing(what, expected, why),
    };
    let trace = match results.text(trace_name) {
        Ok(trace) => trace,
        Err(why) => return Check::missing(what, expected, why),
    };
    let overrun = oracle::overruns(
        &results
            .text(&format!("{trace_name}.stats"))
            .unwrap_or_default(),
    );
    let counts = oracle::parse_blk_trace(&trace);
    let events = report.get("events").cloned().unwrap_or(Value::Null);
    let rows = oracle::compare(&events, &counts);
    let dropped = events.get("dropped").and_then(Value::as_u64).unwrap_or(0);
    let missed = events.get("missed").and_then(Value::as_u64).unwrap_or(0);
    let exact = rows.iter().all(|row| row.report == row.oracle);
    let agree = oracle::agrees_allowing_declared_misses(&rows, missed);
    let total: u64 = rows.iter().map(|row| row.oracle).sum();
    let found = if exact {
        format!(
            "{total} events agree ({})",
            rows.iter()
                .map(|row| format!("{}{}", &row.label[..1], row.oracle))
                .collect::<Vec<_>>()
                .join(" ")
        )
    } else {
        rows.iter()
            .filter(|row| row.report != row.oracle)
            .map(|row| format!("{}: tool {} vs blk {}", row.label, row.report, row.oracle))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let found = if missed > 0 {
        format!("{found}; tool declared {missed} missed")
    } else {
        found
    };
    let found = if overrun > 0 || dropped > 0 {
        format!("{found}; blk overrun {overrun}, tool dropped {dropped}")
    } else {
        found
    };
    // Probe runs the kernel skipped (nested BPF on one CPU) explain lost events.
    let misses = oracle::recursion_misses(
        &results
            .text(&format!("{report_name}.fdinfo"))
            .unwrap_or_default(),
    );
    let found = if misses > 0 {
        format!("{found}; kernel skipped {misses} probe runs (recursion_misses)")
    } else {
        found
    };
    // An empty window proves nothing.
    Check::new(
        what,
        expected,
        found,
        agree && overrun == 0 && dropped == 0 && total > 0,
    )
}

/// `devices[]` or `devices[].partitions[]` entry named `name`.
pub fn device_entry<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    let devices = report.get("devices")?.as_array()?;
    devices.iter().find_map(|device| {
        if device.get("name").and_then(Value::as_str) == Some(name) {
            return Some(device);
        }
        device
            .get("partitions")?
            .as_array()?
            .iter()
            .find(|part| part.get("name").and_then(Value::as_str) == Some(name))
    })
}

/// `measures.ops.<op>.<field>` of a device entry.
pub fn op_measure(entry: &Value, op: &str, field: &str) -> Option<u64> {
    entry
        .get("measures")?
        .get("ops")?
        .get(op)?
        .get(field)?
        .as_u64()
}

/// An event count from the report's `events`.
pub fn event(report: &Value, key: &str) -> u64 {
    report
        .get("events")
        .and_then(|events| events.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Value {
        serde_json::json!({
            "diagnoses": [
                {"code": "misaligned_start", "device": "vda1", "evidence": {"partition_start": 1785}},
                {"code": "subpage_block_size", "device": "vda1", "evidence": {"block_size": 512}},
                {"code": "subpage_block_size", "device": "vdb1", "evidence": {"block_size": 1024}}
            ],
            "devices": [{"name": "vda", "partitions": [
                {"name": "vda1", "measures": {"ops": {"write": {"commands": 9}}}}
            ]}]
        })
    }

    #[test]
    fn exact_sets_pass_and_anything_else_fails() {
        let report = Ok(report());
        let both = ["misaligned_start", "subpage_block_size"];
        assert!(expect_diagnoses("l1", &report, "vda1", &both, Some(512)).pass);
        // Wrong block size, a missing code, an extra code, a missing report: all fail.
        assert!(!expect_diagnoses("l1", &report, "vda1", &both, Some(1024)).pass);
        assert!(!expect_diagnoses("l1", &report, "vda1", &both[..1], None).pass);
        assert!(!expect_diagnoses("l2", &report, "vdb1", &[], None).pass);
        assert!(expect_diagnoses("l3", &report, "vdc1", &[], None).pass);
        let missing = Err("no report".to_string());
        assert!(!expect_diagnoses("l3", &missing, "vdc1", &[], None).pass);
    }

    #[test]
    fn the_virt_boundary_counts_when_named_in_cause_or_explanation() {
        let report = serde_json::json!({"diagnoses": [
            {"code": "merge_blocked", "device": "nvme0n1", "evidence": {},
             "explanation": "The device's virt boundary (mask 0xfff) refuses to merge"},
            {"code": "split_amplification", "device": "nvme0n1", "evidence": {"cause": "virt_boundary"}},
            {"code": "split_amplification", "device": "vda", "evidence": {"cause": "max_sectors"},
             "explanation": "Each piece is max_sectors_kb"}
        ]});
        let nvme = diagnoses_on(&report, "nvme0n1");
        assert!(
            nvme.iter().all(|found| found.names_virt_boundary),
            "{nvme:?}"
        );
        assert!(!diagnoses_on(&report, "vda")[0].names_virt_boundary);
        assert_eq!(
            describe(&nvme),
            "merge_blocked(virt boundary), split_amplification(cause virt_boundary)"
        );
    }

    #[test]
    fn partitions_are_found_inside_their_disk() {
        let report = report();
        let entry = device_entry(&report, "vda1").unwrap();
        assert_eq!(op_measure(entry, "write", "commands"), Some(9));
        assert!(device_entry(&report, "vdz").is_none());
    }

    #[test]
    fn value_files_split_on_the_first_equals_sign() {
        let values = parse_values("disk.scheduler=[none] mq-deadline\npart.start=1785\njunk\n");
        assert_eq!(values["part.start"], "1785");
        assert_eq!(values["disk.scheduler"], "[none] mq-deadline");
        assert_eq!(values.len(), 2);
    }
}
