//! `cargo xtask vm-test`: geometries and kernels the host cannot offer, in qemu.
//!
//! The host kernel has no modules, no device-mapper, NVMe or SCSI, and its loop
//! devices always have physical == logical block size. So each scenario boots
//! Debian's 6.1 and 6.12 LTS kernels under qemu (TCG) with its own disks, runs
//! a script from `xtask/vm/scenarios/` with a static iosplit-trace inside, and
//! judges the JSON it wrote. Everything is cached under `target/vm/`.

mod blktrace13;
mod btt;
mod check;
mod initramfs;
mod kernel;
mod oracle;
mod protocol_v2;
mod qemu;
mod report;
mod scenarios;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use clap::Args;

use crate::util::{output, run, workspace_root, Result};
use check::{Check, Results};

#[derive(Debug, Default, Args)]
pub struct VmArgs {
    /// Run only this scenario (repeatable); `--list` shows them.
    #[arg(long, value_name = "NAME")]
    pub scenario: Vec<String>,
    /// Run only on this kernel line (repeatable): `6.1`, `6.12`.
    #[arg(long, value_name = "LINE")]
    pub kernel: Vec<String>,
    /// List the scenarios and kernels and exit.
    #[arg(long)]
    pub list: bool,
    /// Use the iosplit-trace binary at this path instead of building one (must be static).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Do not re-run a scenario whose checks failed.
    #[arg(long)]
    pub no_retry: bool,
}

/// The iosplit-trace binary the guests run, for evaluators that also run it
/// on the host (blk-oracle's `analyze --from blktrace`).
static TRACER: OnceLock<PathBuf> = OnceLock::new();

/// The binary the guests run (set before any scenario is evaluated).
pub(crate) fn tracer() -> Option<&'static Path> {
    TRACER.get().map(PathBuf::as_path)
}

/// The results of one scenario.
struct Ran {
    scenario: &'static str,
    kernel: String,
    checks: Vec<Check>,
    seconds: f64,
    /// The first attempt failed and this is the second.
    retried: bool,
}

pub fn vm_test(args: &VmArgs) -> Result<()> {
    let all = scenarios::all();
    if args.list {
        for scenario in &all {
            println!("{:<20} {}", scenario.name, scenario.summary);
        }
        let lines: Vec<_> = kernel::LINES.iter().map(|line| line.name).collect();
        println!("each on kernels: {}", lines.join(", "));
        return Ok(());
    }
    for wanted in &args.kernel {
        if !kernel::LINES.iter().any(|line| line.name == wanted) {
            let names: Vec<_> = kernel::LINES.iter().map(|line| line.name).collect();
            return Err(format!(
                "unknown kernel {wanted}; known: {}",
                names.join(", ")
            ));
        }
    }
    for wanted in &args.scenario {
        if !all.iter().any(|s| s.name == wanted) {
            let names: Vec<_> = all.iter().map(|s| s.name).collect();
            return Err(format!(
                "unknown scenario {wanted}; known: {}",
                names.join(", ")
            ));
        }
    }
    let selected: Vec<_> = all
        .into_iter()
        .filter(|s| args.scenario.is_empty() || args.scenario.iter().any(|w| w == s.name))
        .collect();

    let started = Instant::now();
    let cache = workspace_root().join("target/vm");
    let tracer = match &args.binary {
        Some(path) => path.clone(),
        None => build_static_tracer(&cache)?,
    };
    require_static(&tracer)?;
    let _ = TRACER.set(tracer.clone());
    let guest_io = build_guest_io(&cache)?;
    let mut guests = Vec::new();
    for line in kernel::LINES
        .iter()
        .filter(|line| args.kernel.is_empty() || args.kernel.iter().any(|k| k == line.name))
    {
        let kernel = kernel::ensure(&cache, line)?;
        let image = initramfs::ensure(&initramfs::Inputs {
            kernel: &kernel,
            extra_tools: &[],
            tracer: &tracer,
            guest_io: &guest_io,
            cache: &cache,
        })?;
        eprintln!(
            "xtask: guest ready in {:.0}s ({}, {})",
            started.elapsed().as_secs_f64(),
            kernel.package,
            image.display()
        );
        guests.push((kernel, image));
    }

    let results_root = cache.join("results");
    let mut ran = Vec::new();
    for (scenario, (kernel, image)) in selected
        .iter()
        .flat_map(|scenario| guests.iter().map(move |guest| (scenario, guest)))
    {
        // A scenario with tools of its own boots an image of its own.
        let own_image = match scenario.extra_tools {
            [] => None,
            extra_tools => Some(initramfs::ensure(&initramfs::Inputs {
                kernel,
                extra_tools,
                tracer: &tracer,
                guest_io: &guest_io,
                cache: &cache,
            })?),
        };
        let image = own_image.as_deref().unwrap_or(image);
        let mut result = run_scenario(scenario, kernel, image, &cache, &results_root)?;
        let failed: Vec<String> = result
            .checks
            .iter()
            .filter(|c| !c.pass)
            .map(|c| format!("{} (expected {}, found {})", c.what, c.expected, c.found))
            .collect();
        if !failed.is_empty() && !args.no_retry {
            // Software-emulated guests are slow and timing-sensitive; one retry,
            // said out loud, keeps a rare hiccup from failing the whole matrix.
            eprintln!(
                "xtask: vm-test {} on {} failed {} check(s), retrying once: {}",
                scenario.name,
                kernel.line.name,
                failed.len(),
                failed.join("; ")
            );
            result = run_scenario(scenario, kernel, image, &cache, &results_root)?;
            result.retried = true;
        }
        ran.push(result);
    }

    print_table(&ran);
    write_summary(&results_root, &ran)?;
    let failed: usize = ran
        .iter()
        .map(|r| r.checks.iter().filter(|c| !c.pass).count())
        .sum();
    let total: usize = ran.iter().map(|r| r.checks.len()).sum();
    // Repeated last, where a CI log's tail shows them, one line each.
    for r in &ran {
        for c in r.checks.iter().filter(|c| !c.pass) {
            eprintln!(
                "xtask: FAILED {} on {}: {} (expected {}, found {})",
                r.scenario, r.kernel, c.what, c.expected, c.found
            );
        }
    }
    eprintln!(
        "xtask: vm-test took {:.0}s in all",
        started.elapsed().as_secs_f64()
    );
    // The plain closing line CI reads: every check is one test.
    println!("vm-test: {} passed, {failed} failed", total - failed);
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("vm-test: {failed} of {total} checks failed"))
    }
}

/// Boots one scenario's guest and evaluates what it wrote back.
fn run_scenario(
    scenario: &scenarios::Scenario,
    kernel: &kernel::Kernel,
    image: &Path,
    cache: &Path,
    results_root: &Path,
) -> Result<Ran> {
    eprintln!(
        "xtask: vm-test {} on {}: {}",
        scenario.name, kernel.release, scenario.summary
    );
    let work = cache.join("run").join(kernel.line.name).join(scenario.name);
    let outcome = qemu::boot(&qemu::Boot {
        scenario: scenario.name,
        vmlinuz: &kernel.vmlinuz,
        initramfs: image,
        disks: &scenario.disks,
        work: &work,
        timeout: scenario.timeout,
    })?;
    let mut checks = finished(&outcome, "", scenario.timeout);
    let mut elapsed = outcome.elapsed;
    if !scenario.fixed_disks.is_empty() {
        // The fix is a hypervisor setting: a second boot, the same script.
        let fixed = qemu::boot(&qemu::Boot {
            scenario: scenario.name,
            vmlinuz: &kernel.vmlinuz,
            initramfs: image,
            disks: &scenario.fixed_disks,
            work: &work.join("fixed"),
            timeout: scenario.timeout,
        })?;
        checks.extend(finished(&fixed, "fixed ", scenario.timeout));
        elapsed += fixed.elapsed;
        let _ = std::fs::copy(&fixed.console, outcome.results.join("fixed.console.txt"));
        if let Ok(entries) = std::fs::read_dir(&fixed.results) {
            for entry in entries.flatten() {
                let name = format!("fixed.{}", entry.file_name().to_string_lossy());
                let _ = std::fs::copy(entry.path(), outcome.results.join(name));
            }
        }
    }
    let results = Results::new(&outcome.results);
    checks.extend((scenario.evaluate)(&results, &kernel.line));
    let guest_kernel = results
        .text("kernel")
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| kernel.release.clone());
    let kept = results_root.join(kernel.line.name).join(scenario.name);
    keep_results(&outcome.results, &outcome.console, &kept)?;
    eprintln!(
        "xtask: vm-test {} on {} took {:.0}s; results in {}",
        scenario.name,
        kernel.line.name,
        elapsed.as_secs_f64(),
        kept.display()
    );
    Ok(Ran {
        scenario: scenario.name,
        kernel: guest_kernel,
        checks,
        seconds: elapsed.as_secs_f64(),
        retried: false,
    })
}

/// A failed check when a boot was killed or left no results; `boot` prefixes its name.
fn finished(outcome: &qemu::Outcome, boot: &str, timeout: std::time::Duration) -> Vec<Check> {
    let results = Results::new(&outcome.results);
    if outcome.timed_out {
        vec![Check::new(
            format!("{boot}guest finished"),
            format!("within {}s", timeout.as_secs()),
            format!(
                "killed after {:.0}s; see {}",
                outcome.elapsed.as_secs_f64(),
                outcome.console.display()
            ),
            false,
        )]
    } else if results.text("status").is_err() {
        vec![Check::new(
            format!("{boot}guest finished"),
            "results written",
            format!("no results; see {}", outcome.console.display()),
            false,
        )]
    } else {
        Vec::new()
    }
}

/// Builds iosplit-trace with a static glibc into `target/vm/cargo`.
pub(crate) fn build_static_tracer(cache: &Path) -> Result<PathBuf> {
    let target_dir = cache.join("cargo");
    run(Command::new("cargo")
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
            "-p",
            "iosplit-trace",
            "--target",
            "x86_64-unknown-linux-gnu",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        // Only for the target: build scripts and proc macros stay dynamic.
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-C target-feature=+crt-static",
        ))?;
    Ok(target_dir.join("x86_64-unknown-linux-gnu/release/iosplit-trace"))
}

/// The guest has no libc of its own for the tool: refuse a dynamic binary early.
pub(crate) fn require_static(binary: &Path) -> Result<()> {
    let described = output(Command::new("file").arg("-L").arg(binary))
        .ok_or_else(|| format!("cannot inspect {}", binary.display()))?;
    if described.contains("statically linked") || described.contains("static-pie linked") {
        Ok(())
    } else {
        Err(format!(
            "{} is not statically linked: {}",
            binary.display(),
            described.trim()
        ))
    }
}

/// Compiles `xtask/vm/guest-io.c` statically when the source changed.
fn build_guest_io(cache: &Path) -> Result<PathBuf> {
    let source = workspace_root().join("xtask/vm/guest-io.c");
    let binary = cache.join("guest-io");
    let newer = |a: &Path, b: &Path| -> bool {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        match (modified(a), modified(b)) {
            (Some(a), Some(b)) => a > b,
            _ => true,
        }
    };
    if !binary.is_file() || newer(&source, &binary) {
        std::fs::create_dir_all(cache)
            .map_err(|err| format!("cannot create {}: {err}", cache.display()))?;
        run(Command::new("cc")
            .args(["-O2", "-Wall", "-Wextra", "-static", "-o"])
            .arg(&binary)
            .arg(&source))?;
    }
    Ok(binary)
}

fn keep_results(results: &Path, console: &Path, kept: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(kept);
    std::fs::create_dir_all(kept)
        .map_err(|err| format!("cannot create {}: {err}", kept.display()))?;
    let _ = std::fs::copy(console, kept.join("console.txt"));
    if let Ok(entries) = std::fs::read_dir(results) {
        for entry in entries.flatten() {
            let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
        }
    }
    Ok(())
}

fn print_table(ran: &[Ran]) {
    let rows: Vec<[String; 6]> = ran
        .iter()
        .flat_map(|r| {
            r.checks.iter().map(|c| {
                [
                    r.scenario.to_string(),
                    r.kernel.clone(),
                    c.what.clone(),
                    c.expected.clone(),
                    c.found.clone(),
                    match (c.pass, r.retried) {
                        (true, false) => "PASS",
                        (true, true) => "PASS (retry)",
                        (false, _) => "FAIL",
                    }
                    .to_string(),
                ]
            })
        })
        .collect();
    let header = ["scenario", "kernel", "check", "expected", "found", "result"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!();
    println!("{}", line(&header.map(String::from)));
    println!("{}", widths.map(|w| "-".repeat(w)).join("-+-"));
    for row in &rows {
        println!("{}", line(row));
    }
    for r in ran {
        let passed = r.checks.iter().filter(|c| c.pass).count();
        println!(
            "{} on {}: {passed}/{} checks passed in {:.0}s",
            r.scenario,
            r.kernel,
            r.checks.len(),
            r.seconds
        );
    }
}

fn write_summary(root: &Path, ran: &[Ran]) -> Result<()> {
    let scenarios: Vec<serde_json::Value> = ran
        .iter()
        .map(|r| {
            serde_json::json!({
                "scenario": r.scenario,
                "kernel": r.kernel,
                "seconds": r.seconds,
                "retried": r.retried,
                "pass": r.checks.iter().all(|c| c.pass),
                "checks": r.checks.iter().map(|c| serde_json::json!({
                    "check": c.what, "expected": c.expected, "found": c.found, "pass": c.pass,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let path = root.join("summary.json");
    std::fs::create_dir_all(root)
        .map_err(|err| format!("cannot create {}: {err}", root.display()))?;
    let text = serde_json::to_string_pretty(&serde_json::json!({ "scenarios": scenarios }))
        .map_err(|err| format!("cannot encode the summary: {err}"))?;
    std::fs::write(&path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))
}
