//! Real blktrace binaries (tests/corpus-blktrace/, provenance in its
//! MANIFEST.md), read three ways: Debian's blkparse and btt, and
//! `analyze --from blktrace`. Nothing here is a stored expectation: each run
//! parses blkparse's and btt's own output and holds ours to it, by the rules
//! in xtask/src/vm/btt.rs (the VM matrix judges fresh captures by the same).
//!
//! blkparse and btt come from the Debian package blktrace (`cargo xtask
//! setup` installs it). Without them the test says so and passes, except on
//! CI (`CI=true`), where it fails.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../xtask/src/vm/btt.rs"]
#[allow(dead_code)]
mod btt;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus-blktrace")
}

/// Whether blkparse and btt run here; on CI their absence is a failure.
fn oracle_present() -> bool {
    let runs = |tool: &str| {
        Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let missing: Vec<&str> = ["blkparse", "btt"]
        .into_iter()
        .filter(|tool| !runs(tool))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let message = format!(
        "{} not found (Debian package blktrace; `cargo xtask setup` installs it)",
        missing.join(" and ")
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{message}: required on CI"
    );
    eprintln!("corpus_btt: skipped: {message}");
    false
}

/// The capture directories: each holds one or more devices' per-CPU files
/// and the traced machine's `check --json` (geometry.json).
fn captures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus())
        .expect("tests/corpus-blktrace")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Whether MANIFEST.md marks this capture as made only of bios btt follows
/// (`btt follows every bio: yes` in its section).
fn follows_all(capture: &Path) -> bool {
    let manifest = std::fs::read_to_string(corpus().join("MANIFEST.md")).expect("MANIFEST.md");
    let name = capture.file_name().unwrap().to_string_lossy().into_owned();
    let section = manifest
        .split("\n## ")
        .find(|section| section.starts_with(&format!("`{name}`")))
        .unwrap_or_else(|| panic!("MANIFEST.md has no section `{name}`"));
    section.contains("btt follows every bio: yes")
}

#[test]
fn every_capture_reads_as_blkparse_and_btt_read_it() {
    if !oracle_present() {
        return;
    }
    let tracer = Path::new(env!("CARGO_BIN_EXE_iosplit-trace"));
    let mut failures = Vec::new();
    let mut judged = 0;
    let mut fully_followed = 0;
    for capture in captures() {
        // Another project's capture comes without the traced machine's geometry.
        let geometry = Some(capture.join("geometry.json")).filter(|path| path.is_file());
        let prefixes = btt::prefixes(&capture);
        assert!(
            !prefixes.is_empty(),
            "{} holds no blktrace files",
            capture.display()
        );
        let follows_all = follows_all(&capture);
        for prefix in prefixes {
            let scratch = std::env::temp_dir().join(format!(
                "corpus-btt-{}-{}-{prefix}",
                std::process::id(),
                capture.file_name().unwrap().to_string_lossy()
            ));
            let dir = btt::isolate(&capture, &prefix, &scratch).unwrap();
            let readings = btt::read(&dir, &prefix, tracer, geometry.as_deref())
                .unwrap_or_else(|why| panic!("{}: {why}", capture.display()));
            let _ = std::fs::remove_dir_all(&scratch);
            let label = format!(
                "{}/{prefix}",
                capture.file_name().unwrap().to_string_lossy()
            );
            // The capture must have something to agree on.
            let lines = btt::actions(&readings.blkparse);
            assert!(
                lines.get("Q").copied().unwrap_or(0) > 0
                    && lines.get("C").copied().unwrap_or(0) > 0,
                "{label}: no Q or C lines"
            );
            for judgement in btt::judge(&label, &readings, follows_all) {
                judged += 1;
                eprintln!(
                    "{} {}: expected {}, found {}",
                    if judgement.pass { "ok  " } else { "FAIL" },
                    judgement.what,
                    judgement.expected,
                    judgement.found
                );
                if !judgement.pass {
                    failures.push(judgement.what);
                }
            }
            if follows_all {
                fully_followed += 1;
            }
        }
    }
    assert!(judged > 0, "no capture judged");
    assert!(
        fully_followed > 0,
        "no capture btt follows fully: Q2C and D2C would only be bounded"
    );
    assert!(failures.is_empty(), "disagreements: {failures:#?}");
}

#[test]
fn every_capture_is_in_the_manifest() {
    let manifest = std::fs::read_to_string(corpus().join("MANIFEST.md")).expect("MANIFEST.md");
    for capture in captures() {
        let name = capture.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            manifest.contains(&format!("## `{name}`")),
            "{name} is not described in MANIFEST.md"
        );
        let section = manifest
            .split("\n## ")
            .find(|section| section.starts_with(&format!("`{name}`")))
            .unwrap_or_default();
        assert!(
            capture.join("geometry.json").is_file() || section.contains("no `geometry.json`"),
            "{name}: no geometry.json, and MANIFEST.md does not say why"
        );
    }
}
