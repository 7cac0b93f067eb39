//! Reading what a guest left in its results directory, and turning it into
//! checks: expected vs found, pass or fail.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

use serde::de::DeserializeOwned;

use super::oracle;
use super::report::{Audit, Code, Findings, Report, Severity};

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

/// A JSON document from a results directory, read once, or why it could not be.
pub type Loaded<T> = Result<Rc<T>, String>;

/// The results directory of one boot.
pub struct Results<'a> {
    pub dir: &'a Path,
    /// Each JSON document read so far, by file name and type.
    read: RefCell<BTreeMap<(String, TypeId), Rc<dyn Any>>>,
}

impl<'a> Results<'a> {
    pub fn new(dir: &'a Path) -> Results<'a> {
        Results {
            dir,
            read: RefCell::default(),
        }
    }

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

    /// A report written by iosplit-trace `report` or `run`.
    pub fn report(&self, name: &str) -> Loaded<Report> {
        self.json(name)
    }

    /// A document written by iosplit-trace `check`.
    pub fn audit(&self, name: &str) -> Loaded<Audit> {
        self.json(name)
    }

    /// A JSON document, read as `T` the first time it is asked for. The
    /// error names the file and quotes the tool's stderr, which says why it
    /// is missing, or says which key did not read as `T`'s.
    pub fn json<T: DeserializeOwned + 'static>(&self, name: &str) -> Loaded<T> {
        let key = (name.to_string(), TypeId::of::<T>());
        if let Some(read) = self.read.borrow().get(&key) {
            return Ok(Rc::clone(read)
                .downcast::<T>()
                .unwrap_or_else(|_| unreachable!("kept under its own type")));
        }
        let stderr = self.text(&format!("{name}.stderr")).unwrap_or_default();
        // The last line the tool wrote (`+ ` lines are the guest shell's trace).
        let reason = stderr
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty() && !line.starts_with("+ "))
            .unwrap_or("")
            .to_string();
        let text = self.text(name).map_err(|why| format!("{why}: {reason}"))?;
        let read: Rc<T> = Rc::new(serde_json::from_str(&text).map_err(|err| {
            if text.trim().is_empty() {
                format!("{name} empty: {reason}")
            } else if err.is_data() {
                format!("{name} does not read as expected: {err}")
            } else {
                format!("{name} is not JSON: {reason}")
            }
        })?);
        self.read.borrow_mut().insert(key, read.clone());
        Ok(read)
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
    pub code: Code,
    pub block_size: Option<u64>,
    pub cause: Option<String>,
    /// The cause or the explanation names the virt boundary.
    pub names_virt_boundary: bool,
    pub severity: Severity,
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
pub fn diagnoses_on(report: &impl Findings, device: &str) -> Vec<Found> {
    let mut found: Vec<Found> = report
        .diagnoses()
        .iter()
        .filter(|diagnosis| diagnosis.is_on(device))
        .map(|diagnosis| {
            let cause = diagnosis.cause().unwrap_or("").to_lowercase();
            let explanation = diagnosis.explanation.to_lowercase();
            Found {
                severity: diagnosis.severity,
                names_virt_boundary: cause.contains("virt_boundary")
                    || explanation.contains("virt boundary")
                    || explanation.contains("virt_boundary"),
                code: diagnosis.code(),
                block_size: diagnosis.block_size(),
                cause: diagnosis.cause().map(str::to_string),
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
pub fn expect_no_warning(what: &str, report: &Loaded<impl Findings>, device: &str) -> Check {
    let expected = "no warning or critical (info allowed)";
    let report = match report {
        Ok(report) => report,
        Err(why) => return Check::missing(what, expected, why.clone()),
    };
    let found = diagnoses_on(&**report, device);
    let loud: Vec<String> = found
        .iter()
        .filter(|f| f.severity != Severity::Info)
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
    report: &Loaded<impl Findings>,
    device: &str,
    codes: &[Code],
    block_size: Option<u64>,
) -> Check {
    let mut expected = if codes.is_empty() {
        "none".to_string()
    } else {
        codes
            .iter()
            .map(|code| code.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(size) = block_size {
        expected.push_str(&format!(" (bs {size})"));
    }
    let report = match report {
        Ok(report) => report,
        Err(why) => return Check::missing(what, expected, why.clone()),
    };
    let found = diagnoses_on(&**report, device);
    let found_codes: BTreeSet<Code> = found.iter().map(|f| f.code).collect();
    let wanted: BTreeSet<Code> = codes.iter().copied().collect();
    let size_ok = block_size.is_none_or(|size| {
        found
            .iter()
            .any(|f| f.code == Code::SubpageBlockSize && f.block_size == Some(size))
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
    let report = match results.report(report_name) {
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
    let rows = oracle::compare(&report.events, &counts);
    let (dropped, missed) = (report.events.dropped, report.events.missed);
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

#[cfg(test)]
mod tests {
    use super::super::report::tests::empty_report;
    use super::*;

    fn report() -> Report {
        let mut report = empty_report();
        let diagnosis = |code: &str, device: &str, evidence: serde_json::Value| {
            serde_json::json!({"code": code, "device": device, "severity": "warning",
                               "evidence": evidence, "explanation": "", "fix": ""})
        };
        report["diagnoses"] = serde_json::json!([
            diagnosis(
                "misaligned_start",
                "vda1",
                serde_json::json!({"partition_start": 1785})
            ),
            diagnosis(
                "subpage_block_size",
                "vda1",
                serde_json::json!({"block_size": 512})
            ),
            diagnosis(
                "subpage_block_size",
                "vdb1",
                serde_json::json!({"block_size": 1024})
            )
        ]);
        report["devices"] = serde_json::json!([{"name": "vda", "dev": "254:0",
            "geometry": {}, "measures": {"ops": {}}, "partitions": [
            {"name": "vda1", "dev": "254:1", "geometry": {}, "measures": {"ops": {"write": {
                "user_ios": 1, "fragments": 1, "commands": 9, "disk_commands": 0, "splits": 0,
                "misaligned_pbs_commands": 0, "misaligned_4k_commands": 0,
                "failed_commands": 0, "failed_user_ios": 0, "split_causes": {}}}}}
        ]}]);
        serde_json::from_value(report).unwrap()
    }

    #[test]
    fn exact_sets_pass_and_anything_else_fails() {
        let report = Ok(Rc::new(report()));
        let both = [Code::MisalignedStart, Code::SubpageBlockSize];
        assert!(expect_diagnoses("l1", &report, "vda1", &both, Some(512)).pass);
        // Wrong block size, a missing code, an extra code, a missing report: all fail.
        assert!(!expect_diagnoses("l1", &report, "vda1", &both, Some(1024)).pass);
        assert!(!expect_diagnoses("l1", &report, "vda1", &both[..1], None).pass);
        assert!(!expect_diagnoses("l2", &report, "vdb1", &[], None).pass);
        assert!(expect_diagnoses("l3", &report, "vdc1", &[], None).pass);
        let missing: Loaded<Report> = Err("no report".to_string());
        assert!(!expect_diagnoses("l3", &missing, "vdc1", &[], None).pass);
    }

    #[test]
    fn the_virt_boundary_counts_when_named_in_cause_or_explanation() {
        let mut report = empty_report();
        report["diagnoses"] = serde_json::json!([
            {"code": "merge_blocked", "device": "nvme0n1", "severity": "warning", "evidence": {},
             "explanation": "The device's virt boundary (mask 0xfff) refuses to merge", "fix": ""},
            {"code": "split_amplification", "device": "nvme0n1", "severity": "warning",
             "evidence": {"cause": "virt_boundary"}, "explanation": "", "fix": ""},
            {"code": "split_amplification", "device": "vda", "severity": "warning",
             "evidence": {"cause": "max_sectors"},
             "explanation": "Each piece is max_sectors_kb", "fix": ""}
        ]);
        let report: Report = serde_json::from_value(report).unwrap();
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
        let entry = report.device("vda1").unwrap();
        assert_eq!(entry.writes().map(|w| w.commands), Some(9));
        assert!(report.device("vdz").is_none());
    }

    #[test]
    fn a_document_is_read_once_and_a_broken_one_says_why() {
        let dir = std::env::temp_dir().join(format!("iosplit-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("report.json"), empty_report().to_string()).unwrap();
        std::fs::write(dir.join("renamed.json"), r#"{"diagnoses": []}"#).unwrap();
        std::fs::write(dir.join("cut.json"), r#"{"diagnoses": ["#).unwrap();
        std::fs::write(dir.join("cut.json.stderr"), "+ iosplit-trace\nkilled\n").unwrap();
        let results = Results::new(&dir);
        let first = results.report("report.json").unwrap();
        assert!(Rc::ptr_eq(&first, &results.report("report.json").unwrap()));
        let renamed = results.report("renamed.json").unwrap_err();
        assert!(renamed.contains("missing field `events`"), "{renamed}");
        assert_eq!(
            results.report("cut.json").unwrap_err(),
            "cut.json is not JSON: killed"
        );
        assert!(results.audit("renamed.json").is_err(), "no devices");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn value_files_split_on_the_first_equals_sign() {
        let values = parse_values("disk.scheduler=[none] mq-deadline\npart.start=1785\njunk\n");
        assert_eq!(values["part.start"], "1785");
        assert_eq!(values["disk.scheduler"], "[none] mq-deadline");
        assert_eq!(values.len(), 2);
    }
}
