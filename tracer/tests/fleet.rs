//! The fleet's files: `check --prometheus` (the static audit in the text
//! exposition format, for node_exporter's textfile collector) on the seed's
//! fixture disk, checked by `promtool check metrics`; `check -o`'s atomic
//! write; the audit's systemd service and timer under `systemd-analyze
//! verify`, and its command run as an unprivileged user with no capability;
//! the alerting rules in dist/prometheus/ under `promtool test rules`.
//!
//! promtool comes with Debian's `prometheus` (`cargo xtask setup` installs
//! it): without it these tests fail under CI=true and say they skipped
//! elsewhere.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use common::{binary, privileged, sh};
use iosplit_trace::frontend::check::{check_in, render_prometheus, write_atomically};
use iosplit_trace::geometry::ioctl::NoIoctls;

fn seed_layout(n: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/sysfs/seed-layout{n}"))
}

fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dist")
        .join(file)
}

/// True when promtool is on PATH. Under CI=true a missing promtool fails
/// the test instead of skipping it.
fn have_promtool(test: &str) -> bool {
    if Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: promtool is missing (Debian package prometheus; `cargo xtask setup` installs it)");
    }
    eprintln!("SKIPPED {test}: no promtool (apt-get install prometheus)");
    false
}

/// `promtool check metrics` on `text`: its exit status and what it said.
fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn seed_audit() -> String {
    let report = check_in(&seed_layout(1), &[], &NoIoctls).unwrap();
    render_prometheus(&report, UNIX_EPOCH + Duration::from_secs(1_800_000_000))
}

#[test]
fn the_seed_audit_in_the_text_format() {
    let text = seed_audit();
    for line in [
        r#"iosplit_finding{code="subpage_block_size",device="sdc2",severity="critical"} 1"#,
        r#"iosplit_finding{code="misaligned_start",device="sdc2",severity="warning"} 1"#,
        r#"iosplit_device_info{device="sdc",disk="sdc",dev="8:32"} 1"#,
        r#"iosplit_device_info{device="sdc2",disk="sdc",dev="8:34"} 1"#,
        r#"iosplit_partition_start_sectors{device="sdc2",disk="sdc"} 14281785"#,
        r#"iosplit_partition_size_sectors{device="sdc2",disk="sdc"} 27647865"#,
        // 27647865 sectors is odd: the kernel gives sdc2 512-byte blocks.
        r#"iosplit_partition_block_size_bytes{device="sdc2",disk="sdc",source="predicted"} 512"#,
        r#"iosplit_partition_aligned{device="sdc2",disk="sdc"} 0"#,
        "iosplit_audit_timestamp_seconds 1800000000",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    // Every metric has HELP and TYPE, in that order, before its samples.
    let mut described = BTreeSet::new();
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(helped.contains(name), "TYPE before HELP for {name}");
            described.insert(name.to_string());
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(described.contains(name), "{name} has no TYPE line");
        }
    }
    // The clean layout has no finding, and is aligned.
    let clean = check_in(&seed_layout(3), &[], &NoIoctls).unwrap();
    let clean = render_prometheus(&clean, UNIX_EPOCH);
    assert!(!clean.contains("iosplit_finding{"), "{clean}");
    assert!(clean.contains("iosplit_partition_aligned{device=\"sdc2\",disk=\"sdc\"} 1"));
}

#[test]
fn promtool_accepts_the_seed_audit() {
    if !have_promtool("promtool_accepts_the_seed_audit") {
        return;
    }
    let (ok, said) = promtool_check_metrics(&seed_audit());
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
    // The binary's own audit of this machine passes too.
    let out = Command::new(binary())
        .args(["check", "--prometheus"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, said) = promtool_check_metrics(&String::from_utf8_lossy(&out.stdout));
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
}

#[test]
fn check_output_replaces_the_file_atomically() {
    let dir = PathBuf::from(format!("/tmp/iosplit-fleet-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("iosplit-trace.prom");
    std::fs::write(&file, "old\n").unwrap();
    let out = Command::new(binary())
        .args(["check", "--prometheus", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("# TYPE iosplit_audit_timestamp_seconds gauge"),
        "{text}"
    );
    // Nothing is left beside it: the temporary file was renamed.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["iosplit-trace.prom"]);
    // The library call leaves the old file whole when it cannot write.
    let err = write_atomically(&dir.join("no-such-dir/x.prom"), b"new").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    // A directory that does not exist: one line, status 1.
    let out = Command::new(binary())
        .args(["check", "--json", "-o"])
        .arg(dir.join("missing/check.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("iosplit-trace: cannot write "),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

const UNIT_BINARY: &str = "/usr/local/bin/iosplit-trace";

#[test]
fn the_audit_units_pass_systemd_analyze_verify() {
    let dir = PathBuf::from(format!("/tmp/iosplit-fleet-unit-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("man/man1")).unwrap();
    // verify checks that ExecStart exists and the man page is found.
    let service = std::fs::read_to_string(dist("iosplit-trace-audit.service")).unwrap();
    assert!(service.contains(UNIT_BINARY), "{service}");
    std::fs::write(
        dir.join("iosplit-trace-audit.service"),
        service.replace(UNIT_BINARY, binary()),
    )
    .unwrap();
    std::fs::copy(
        dist("iosplit-trace-audit.timer"),
        dir.join("iosplit-trace-audit.timer"),
    )
    .unwrap();
    let man = sh(binary(), &["generate", "man"]);
    std::fs::write(dir.join("man/man1/iosplit-trace.1"), man).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("iosplit-trace-audit.service"))
        .arg(dir.join("iosplit-trace-audit.timer"))
        .env("MANPATH", dir.join("man"))
        .output()
        .expect("run systemd-analyze");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "{stderr}");
    // No capability at all, and the file's directory is the one writable path.
    let setting = |key: &str| -> Vec<&str> {
        service
            .lines()
            .filter_map(|line| line.strip_prefix(key))
            .collect()
    };
    assert_eq!(setting("CapabilityBoundingSet="), [""]);
    assert_eq!(setting("AmbientCapabilities="), [""]);
    assert_eq!(setting("ProtectSystem="), ["strict"]);
    let dir = setting("Environment=TEXTFILE_DIR=");
    assert_eq!(dir, ["/var/lib/prometheus/node-exporter"]);
    assert_eq!(
        setting("ReadWritePaths="),
        [format!("-{}", dir[0]).as_str()]
    );
    assert!(setting("ExecStart=")[0]
        .ends_with("check --prometheus -o ${TEXTFILE_DIR}/iosplit-trace.prom"));
}

/// The unit's ExecStart, its `${TEXTFILE_DIR}` set to `dir`, as words.
fn audit_command(dir: &Path, binary: &Path) -> Vec<String> {
    let service = std::fs::read_to_string(dist("iosplit-trace-audit.service")).unwrap();
    let line = service
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .unwrap();
    line.replace("${TEXTFILE_DIR}", dir.to_str().unwrap())
        .replace(UNIT_BINARY, binary.to_str().unwrap())
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_audit_runs_as_an_unprivileged_user_without_capabilities() {
    if !privileged("the_audit_runs_as_an_unprivileged_user_without_capabilities") {
        return;
    }
    // nobody's own directory, and a copy of the binary nobody may run.
    let dir = PathBuf::from(format!("/tmp/iosplit-fleet-nobody-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let textfile = dir.join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let copy = dir.join("iosplit-trace");
    std::fs::copy(binary(), &copy).unwrap();
    sh(
        "chmod",
        &["755", dir.to_str().unwrap(), copy.to_str().unwrap()],
    );
    sh("chown", &["65534:65534", textfile.to_str().unwrap()]);
    let words = audit_command(&textfile, &copy);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
        ])
        .arg("--no-new-privs")
        .args(&words)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written = std::fs::read_to_string(textfile.join("iosplit-trace.prom"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{words:?}: {stderr}");
    let written = written.unwrap();
    assert!(
        written.contains("iosplit_audit_timestamp_seconds "),
        "{written}"
    );
}

#[test]
fn the_alerting_rules_pass_their_promtool_tests() {
    if !have_promtool("the_alerting_rules_pass_their_promtool_tests") {
        return;
    }
    let rules = dist("prometheus/iosplit-trace.rules.yml");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(dist("prometheus/iosplit-trace.rules.test.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each alert has a severity label, a summary, and a description that names
/// a docs/ page that exists; every iosplit metric a rule uses is documented
/// in docs/prometheus.md.
#[test]
fn every_rule_names_its_documentation_and_documented_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let rules = std::fs::read_to_string(dist("prometheus/iosplit-trace.rules.yml")).unwrap();
    let documented = std::fs::read_to_string(root.join("docs/prometheus.md")).unwrap();
    let blocks: Vec<&str> = rules.split("- alert: ").skip(1).collect();
    assert!(blocks.len() >= 7, "{} alerts", blocks.len());
    for block in blocks {
        let name = block.lines().next().unwrap();
        let severity = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("severity: "))
            .unwrap_or_else(|| panic!("{name} has no severity"));
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}"
        );
        assert!(block.contains("summary: "), "{name} has no summary");
        let description = block.split("description: ").nth(1).unwrap();
        let docs: Vec<&str> = description
            .split_whitespace()
            .filter_map(|word| word.find("docs/").map(|at| &word[at..]))
            .collect();
        assert!(
            !docs.is_empty(),
            "{name}: the description names no docs/ page"
        );
        for doc in docs {
            let path = doc.split('#').next().unwrap();
            assert!(root.join(path).is_file(), "{name}: {path} does not exist");
        }
        let expr = block
            .split("expr: ")
            .nth(1)
            .unwrap()
            .split("for: ")
            .next()
            .unwrap();
        for metric in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("iosplit_"))
        {
            assert!(
                documented.contains(&format!("`{metric}`")),
                "{name}: {metric} is not in docs/prometheus.md"
            );
        }
    }
}

/// dist/kubernetes/ under the Kubernetes API schemas (PyPI's
/// kubernetes-validate bundles them; `cargo xtask setup` installs it), and
/// what no schema checks: the DaemonSet asks for the unit's three
/// capabilities and no privilege, probes /healthz, mounts tracefs, sysfs and
/// the cgroup root, runs this version's image, and the Service and the
/// ServiceMonitor find its pods and their `metrics` port.
#[test]
fn the_kubernetes_manifests_validate_and_match_the_unit() {
    let files = ["daemonset.yaml", "service.yaml"].map(|f| dist(&format!("kubernetes/{f}")));
    let validated = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&files)
        .output();
    match validated {
        Ok(out) => assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "kubernetes-validate: {err} (cargo xtask setup installs it)"
            );
            eprintln!("skipped the schema check: kubernetes-validate: {err}");
        }
    }
    let yaml = |file: &str| -> serde_yaml::Value {
        serde_yaml::from_str(&std::fs::read_to_string(dist(&format!("kubernetes/{file}"))).unwrap())
            .unwrap()
    };
    let (daemonset, service, monitor) = (
        yaml("daemonset.yaml"),
        yaml("service.yaml"),
        yaml("servicemonitor.yaml"),
    );
    let pod = &daemonset["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false);
    let added: BTreeSet<String> = security["capabilities"]["add"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|cap| format!("CAP_{}", cap.as_str().unwrap()))
        .collect();
    let unit = std::fs::read_to_string(dist("iosplit-trace.service")).unwrap();
    let unit_caps: BTreeSet<String> = unit
        .lines()
        .find_map(|line| line.strip_prefix("AmbientCapabilities="))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        added, unit_caps,
        "the DaemonSet's capabilities are the unit's"
    );
    assert_eq!(
        container["image"].as_str().unwrap(),
        format!("localhost/iosplit-trace:{}", env!("CARGO_PKG_VERSION")),
        "the image `cargo xtask image` builds"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/healthz");
    let mounts: BTreeSet<&str> = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for path in ["/sys/kernel/tracing", "/sys", "/sys/fs/cgroup"] {
        assert!(mounts.contains(path), "{path} is not mounted: {mounts:?}");
    }
    assert!(container["resources"]["requests"]["memory"].is_string());
    let labels = &daemonset["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&service["spec"]["selector"], labels);
    assert_eq!(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
    assert_eq!(container["ports"][0]["name"], "metrics");
}
