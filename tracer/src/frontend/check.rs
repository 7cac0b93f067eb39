//! `iosplit-trace check`: a static geometry audit. Reads sysfs (and BLKBSZGET
//! where permitted), runs the engine's audit, and prints the limits, the
//! partition table and the diagnoses. No tracing, no BPF, no root needed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::blk::{atomic_start_grid_sectors, partition_keeps_atomic};
use crate::cli::CheckArgs;
use crate::engine::audit::{self, Placement};
use crate::error::{Error, Result};
use crate::explain;
use crate::geometry::error::GeometryError;
use crate::geometry::ioctl::{DevNodeProbe, DeviceProbe};
use crate::geometry::resolve::resolve_in;
use crate::geometry::stack::Stack;
use crate::geometry::{
    disks, max_sectors, predicted_block_size, AtomicLimits, DiskGeometry, MaxSectorsSource,
    PartitionGeometry,
};
use crate::model::{DeviceReport, Diagnosis, Measures, PartitionReport, SCHEMA_VERSION};

use super::output::{Document, Format, Output};
use super::prometheus::{self, Family, Kind, Labels, Value};
use super::units::{self, BytesForm};

/// Schema name of the `check --json` document.
pub const CHECK_SCHEMA_NAME: &str = "iosplit-trace/check";

/// Text output width.
const COLUMNS: usize = 80;

/// The `check --json` document: the report model without measures.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub schema: &'static str,
    pub schema_version: u32,
    pub diagnoses: Vec<Diagnosis>,
    pub devices: Vec<DeviceReport>,
}

impl Document for CheckReport {
    /// Always [`COLUMNS`] wide: the audit is read as a listing, not a screen.
    fn render_text(&self, _width: u16) -> String {
        render_text(self)
    }
}

pub fn run(args: &CheckArgs) -> Result<ExitCode> {
    let report = check_in(Path::new("/sys"), &args.devices, &DevNodeProbe::default())?;
    let bytes = if args.prometheus {
        render_prometheus(&report, SystemTime::now()).into_bytes()
    } else {
        Format::from_flags(args.json, false).render(&report, COLUMNS as u16)?
    };
    match &args.output {
        Some(path) => write_atomically(path, &bytes)
            .map_err(|err| Error::caused(format!("cannot write {}", path.display()), err))?,
        None => Output::stdout().write_all(&bytes)?,
    }
    // Findings are the output, not a failure: exit 0 either way.
    Ok(ExitCode::SUCCESS)
}

/// Replaces `path` with `bytes` so that a reader (node_exporter's textfile
/// collector) sees the old file or the new one, never a part: the bytes go to
/// a hidden temporary file in the same directory (not named `*.prom`, so the
/// collector skips it), are synced, then renamed over `path`. The file's mode
/// follows the umask; on failure the temporary file is removed and `path` is
/// left as it was.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    // A temporary file left by a killed run with the same pid.
    let _ = std::fs::remove_file(&temp);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
        return written;
    }
    // The rename itself survives a crash once the directory is synced.
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The static audit in the Prometheus text exposition format (version
/// 0.0.4), as node_exporter's textfile collector reads it: one
/// `iosplit_finding` series per finding, each partition's start, size, block
/// size and alignment, and when the audit ran. Names and labels are `serve`'s
/// where the same thing is meant (`device`, `disk`, `code`, `severity`,
/// `iosplit_device_info`, `iosplit_build_info`); the findings have their own
/// name, so a machine that also runs `serve` does not count them twice with
/// its live `iosplit_diagnosis`.
pub fn render_prometheus(report: &CheckReport, now: SystemTime) -> String {
    let seconds = now
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs_f64())
        .unwrap_or_default();
    let mut families = vec![findings_family(&report.diagnoses)];
    families.extend(device_families(&report.devices));
    families.push(Family::new(
        "iosplit_build",
        "The iosplit-trace build that ran the audit.",
        Kind::Info,
        vec![(
            vec![("version", env!("CARGO_PKG_VERSION").to_string())],
            Value::Info,
        )],
    ));
    families.push(Family::new(
        "iosplit_audit_timestamp_seconds",
        "When the audit ran, in seconds since the Unix epoch.",
        Kind::Gauge,
        vec![(Labels::new(), Value::Decimal(seconds))],
    ));
    prometheus::classic_text(&families)
}

fn findings_family(diagnoses: &[Diagnosis]) -> Family {
    Family::new(
        "iosplit_finding",
        "1 for every finding of the static geometry audit (iosplit-trace check; codes in docs/diagnoses.md).",
        Kind::Gauge,
        diagnoses
            .iter()
            .map(|d| {
                let labels = vec![
                    ("code", d.code.to_string()),
                    ("device", d.device.clone()),
                    ("severity", d.severity.as_str().to_string()),
                ];
                (labels, Value::Decimal(1.0))
            })
            .collect(),
    )
}

/// Per-partition gauges: name, help, and the value with any label it adds.
type PartitionGauge = (
    &'static str,
    &'static str,
    fn(&DiskGeometry, &PartitionGeometry) -> (Option<(&'static str, String)>, f64),
);
const PARTITION_GAUGES: [PartitionGauge; 5] = [
    (
        "iosplit_partition_start_sectors",
        "First sector of the partition on its disk, in 512-byte sectors.",
        |_, part| (None, part.start as f64),
    ),
    (
        "iosplit_partition_size_sectors",
        "Length of the partition, in 512-byte sectors.",
        |_, part| (None, part.size as f64),
    ),
    (
        "iosplit_partition_block_size_bytes",
        "The partition's block size: read with BLKBSZGET (source=\"BLKBSZGET\") or, without access to the device, the one the kernel gives its size (source=\"predicted\").",
        |disk, part| {
            let (block_size, source) = match part.block_size {
                Some(bytes) => (bytes, "BLKBSZGET"),
                None => (
                    predicted_block_size(part.size, disk.logical_block_size),
                    "predicted",
                ),
            };
            (Some(("source", source.to_string())), f64::from(block_size))
        },
    ),
    (
        "iosplit_partition_aligned",
        "1 when the partition starts on the physical block, minimum I/O, optimal I/O and chunk boundaries; 0 otherwise.",
        |disk, part| {
            let placement = Placement::of(disk, part.start);
            let aligned = placement.start_offset_bytes == 0
                && placement.io_opt_offset_bytes == 0
                && placement.chunk_offset_sectors == 0;
            (None, if aligned { 1.0 } else { 0.0 })
        },
    ),
    (
        "iosplit_partition_start_offset_bytes",
        "Bytes the partition starts past the last physical block (or minimum I/O) boundary: 0 when aligned to it.",
        |disk, part| (None, Placement::of(disk, part.start).start_offset_bytes as f64),
    ),
];

/// `iosplit_device_info` for every disk and partition, then the partition
/// gauges.
fn device_families(devices: &[DeviceReport]) -> Vec<Family> {
    let mut info = Vec::new();
    for disk in devices.iter().map(|device| &device.geometry) {
        info.push((disk.name.clone(), disk.name.clone(), dev_text(disk.dev)));
        for part in &disk.partitions {
            info.push((part.name.clone(), disk.name.clone(), dev_text(part.dev)));
        }
    }
    let mut families = vec![Family::new(
        "iosplit_device",
        "Disks and partitions the audit read.",
        Kind::Info,
        info.into_iter()
            .map(|(device, disk, dev)| {
                let labels = vec![("device", device), ("disk", disk), ("dev", dev)];
                (labels, Value::Info)
            })
            .collect(),
    )];
    for (name, help, gauge) in PARTITION_GAUGES {
        let samples = devices
            .iter()
            .map(|device| &device.geometry)
            .flat_map(|disk| disk.partitions.iter().map(move |part| (disk, part)))
            .map(|(disk, part)| {
                let (extra, value) = gauge(disk, part);
                let mut labels = vec![("device", part.name.clone()), ("disk", disk.name.clone())];
                labels.extend(extra);
                (labels, Value::Decimal(value))
            })
            .collect();
        families.push(Family::new(name, help, Kind::Gauge, samples));
    }
    families
}

/// Audits the named devices (a partition stands for its disk), or every disk
/// with a non-zero size when none are named.
pub fn check_in(
    sysfs_root: &Path,
    devices: &[String],
    probe: &dyn DeviceProbe,
) -> std::result::Result<CheckReport, GeometryError> {
    let disks = if devices.is_empty() {
        let mut disks = disks::read_disks_in(sysfs_root, None, probe)?;
        // Unattached loop devices and empty drives have nothing to audit.
        disks.retain(|disk| disk.size_sectors > 0);
        disks
    } else {
        let mut names: Vec<String> = Vec::new();
        for arg in devices {
            let resolved = resolve_in(sysfs_root, arg)?;
            if !names.contains(&resolved.disk_name) {
                names.push(resolved.disk_name);
            }
        }
        disks::read_disks_in(sysfs_root, Some(&names), probe)?
    };
    let diagnoses = explain::diagnoses(disks.iter().flat_map(audit::audit_disk));
    Ok(CheckReport {
        schema: CHECK_SCHEMA_NAME,
        schema_version: SCHEMA_VERSION,
        diagnoses,
        devices: disks.into_iter().map(device_report).collect(),
    })
}

fn dev_text(dev: Option<crate::geometry::DevId>) -> String {
    dev.map(|dev| dev.to_string()).unwrap_or_default()
}

fn device_report(disk: DiskGeometry) -> DeviceReport {
    DeviceReport {
        service: Default::default(),
        tag_waits: Vec::new(),
        passthrough: Vec::new(),
        name: disk.name.clone(),
        dev: dev_text(disk.dev),
        partitions: disk
            .partitions
            .iter()
            .map(|part| PartitionReport {
                name: part.name.clone(),
                dev: dev_text(part.dev),
                geometry: part.clone(),
                geometry_known: true,
                measures: Measures::default(),
                gone: false,
            })
            .collect(),
        measures: Measures::default(),
        geometry: disk,
        geometry_known: true,
        gone: false,
    }
}

/// The human report, at most [`COLUMNS`] wide (a single word longer than a
/// line, such as a long device path, is never broken).
pub fn render_text(report: &CheckReport) -> String {
    let mut out = String::new();
    if report.devices.is_empty() {
        out.push_str("No disks to check.\n");
    }
    for (index, device) in report.devices.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        render_disk(&mut out, &device.geometry);
        let findings: Vec<&Diagnosis> = report
            .diagnoses
            .iter()
            .filter(|diagnosis| {
                diagnosis.device == device.name
                    || device.partitions.iter().any(|p| p.name == diagnosis.device)
            })
            .collect();
        if findings.is_empty() {
            let _ = writeln!(out, "\nNo findings on {}.", device.name);
        } else {
            let _ = writeln!(out, "\nFindings on {}:", device.name);
            for diagnosis in findings {
                render_diagnosis(&mut out, diagnosis);
            }
        }
    }
    out
}

fn render_disk(out: &mut String, disk: &DiskGeometry) {
    let kind = match (disk.request_based, disk.rotational) {
        (false, _) => "bio-based",
        (true, true) => "rotational",
        (true, false) => "non-rotational",
    };
    let _ = writeln!(
        out,
        "{} ({}): {}, {kind}",
        disk.name,
        dev_text(disk.dev),
        units::bytes_as(
            disk.size_sectors.saturating_mul(512) as f64,
            BytesForm::Tenths
        )
    );
    let _ = writeln!(
        out,
        "  sectors   logical {} B, physical {} B, alignment offset {} B",
        disk.logical_block_size, disk.physical_block_size, disk.alignment_offset
    );
    let _ = writeln!(
        out,
        "  io size   minimum {}, optimal {}",
        explain::exact_size(u64::from(disk.minimum_io_size)),
        if disk.optimal_io_size == 0 {
            "none".to_string()
        } else {
            explain::exact_size(u64::from(disk.optimal_io_size))
        }
    );
    let _ = writeln!(
        out,
        "  requests  max_sectors_kb {} (hw {}), max_segments {} of up to {}",
        disk.max_sectors_kb,
        disk.max_hw_sectors_kb,
        disk.max_segments,
        units::bytes_as(f64::from(disk.max_segment_size), BytesForm::Tenths)
    );
    out.push_str(&super::text::wrapped_text(
        "  max_sectors ",
        "              ",
        &max_sectors_text(disk),
        COLUMNS as u16,
    ));
    let boundary = if disk.virt_boundary_mask == 0 {
        "none".to_string()
    } else {
        format!("{:#x}", disk.virt_boundary_mask)
    };
    let chunk = if disk.chunk_sectors == 0 {
        "none".to_string()
    } else {
        format!("{} sectors", disk.chunk_sectors)
    };
    let _ = writeln!(
        out,
        "  merging   virt boundary {boundary}, chunk {chunk}, scheduler {}, nomerges {}",
        disk.scheduler, disk.nomerges
    );
    let _ = writeln!(
        out,
        "  block size {}",
        block_size_text(disk.block_size, disk.size_sectors, disk.logical_block_size)
    );
    let _ = writeln!(out, "  atomic    {}", atomic_text(disk.atomic));
    if let Some(stack) = &disk.stack {
        render_stack(out, disk, stack);
    }
    if disk.partitions.is_empty() {
        out.push_str("  no partitions\n");
        return;
    }
    let _ = writeln!(
        out,
        "\n  {:<10} {:>11} {:>11} {:>7} {:>6}  {:>15}  alignment",
        "partition", "start", "size", "start%8", "size%8", "block size"
    );
    for part in &disk.partitions {
        let placement = Placement::of(disk, part.start);
        let verdict = if placement.start_offset_bytes != 0 {
            "misaligned"
        } else if placement.io_opt_offset_bytes != 0 {
            "off io_opt"
        } else if placement.chunk_offset_sectors != 0 {
            "off chunk"
        } else {
            "aligned"
        };
        let _ = writeln!(
            out,
            "  {:<10} {:>11} {:>11} {:>7} {:>6}  {:>15}  {verdict}",
            part.name,
            part.start,
            part.size,
            part.start % 8,
            part.size % 8,
            block_size_text(part.block_size, part.size, disk.logical_block_size),
        );
    }
    render_partition_atomics(out, disk);
}

/// The size cap and where it comes from: "128 KiB (the device's optimal I/O
/// size, by sd's rule on kernels before 6.11; hardware allows 32767 KiB)".
fn max_sectors_text(disk: &DiskGeometry) -> String {
    if disk.max_sectors_kb == 0 {
        return "not known".to_string();
    }
    let size = explain::exact_size(u64::from(disk.max_sectors_kb) * 1024);
    let Some(source) = disk.max_sectors_source else {
        return format!("{size} (its source not read)");
    };
    let words = max_sectors::describe(source, disk.max_sectors_kb, disk.optimal_io_size);
    match (source, disk.max_hw_sectors_kb) {
        (MaxSectorsSource::Hardware, _) | (_, 0) => format!("{size} ({words})"),
        (_, hw_kb) => format!(
            "{size} ({words}; hardware allows {})",
            explain::exact_size(u64::from(hw_kb) * 1024)
        ),
    }
}

/// Each partition's atomic writes, when its disk offers them: kept, or lost
/// to a start off the grid (`atomic_writes_lost` says more).
fn render_partition_atomics(out: &mut String, disk: &DiskGeometry) {
    let Some(limits) = disk.atomic.filter(AtomicLimits::offered) else {
        return;
    };
    let Some(grid) = atomic_start_grid_sectors(limits.unit_min_bytes, limits.boundary_bytes) else {
        return;
    };
    for part in &disk.partitions {
        let verdict =
            if partition_keeps_atomic(part.start, limits.unit_min_bytes, limits.boundary_bytes) {
                format!(
                    "keeps {}",
                    atomic_range(limits.unit_min_bytes, limits.unit_max_bytes)
                )
            } else {
                format!(
                    "none: start {} is off the {grid}-sector atomic grid",
                    part.start
                )
            };
        let _ = writeln!(out, "  atomic    {}: {verdict}", part.name);
    }
}

/// "4 KiB to 64 KiB", or one size when both ends are equal.
fn atomic_range(min: u32, max: u32) -> String {
    if min == max {
        explain::exact_size(u64::from(min))
    } else {
        format!(
            "{} to {}",
            explain::exact_size(u64::from(min)),
            explain::exact_size(u64::from(max))
        )
    }
}

/// A device's own atomic write limits, or why it has none.
fn atomic_text(atomic: Option<AtomicLimits>) -> String {
    match atomic {
        None => "none in this kernel (no queue/atomic_write_* in sysfs)".to_string(),
        Some(limits) if !limits.offered() => "none (the device offers no atomic writes)".into(),
        Some(limits) => format!(
            "unit {}, max {}, boundary {}",
            atomic_range(limits.unit_min_bytes, limits.unit_max_bytes),
            explain::exact_size(u64::from(limits.max_bytes)),
            match limits.boundary_bytes {
                0 => "none".to_string(),
                bytes => explain::exact_size(u64::from(bytes)),
            }
        ),
    }
}

/// A stacked device's legs: each level down to the disk, and where the
/// data lands against the disk's grid.
fn render_stack(out: &mut String, disk: &DiskGeometry, stack: &Stack) {
    let name = if stack.dm_name.is_empty() {
        String::new()
    } else {
        format!(" `{}`", stack.dm_name)
    };
    let _ = writeln!(out, "  stack     {}{name}", stack.kind);
    if let Some(why) = &stack.unreadable {
        let _ = writeln!(out, "            not read: {why}");
    }
    for (leg, path) in stack.legs.iter().zip(stack.paths(&disk.name)) {
        let placement = Placement::of(&leg.bottom, leg.top_zero_on_bottom());
        let verdict = if placement.start_offset_bytes != 0 {
            format!("misaligned by {} B", placement.start_offset_bytes)
        } else {
            "aligned".to_string()
        };
        let _ = writeln!(out, "            {path}: {verdict}");
    }
}

/// BLKBSZGET's value, or the kernel's choice when it could not be read.
fn block_size_text(current: Option<u32>, size_sectors: u64, logical_block_size: u32) -> String {
    match current {
        Some(bytes) => bytes.to_string(),
        None => format!(
            "≈{} predicted",
            predicted_block_size(size_sectors, logical_block_size)
        ),
    }
}

fn render_diagnosis(out: &mut String, diagnosis: &Diagnosis) {
    out.push('\n');
    out.push_str(&super::text::render_diagnosis(diagnosis, COLUMNS as u16));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The disk table's sizes: one decimal in the largest binary unit that fits.
    #[test]
    fn human_sizes() {
        let human_size = |bytes: u64| units::bytes_as(bytes as f64, BytesForm::Tenths);
        assert_eq!(human_size(41_943_040 * 512), "20.0 GiB");
        assert_eq!(human_size(u64::from(u32::MAX)), "4.0 GiB");
        assert_eq!(human_size(100), "100 B");
    }

    /// The seed's fixture disk, its first finding's device given every
    /// character a label value escapes.
    fn pinned_prometheus(now: SystemTime) -> String {
        let sysfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/seed-layout1");
        let mut report = check_in(&sysfs, &[], &crate::geometry::ioctl::NoIoctls).unwrap();
        report.diagnoses[0].device = "a\"b\\c\nd".to_string();
        render_prometheus(&report, now)
    }

    #[test]
    fn the_textfile_is_pinned_byte_for_byte() {
        let text =
            pinned_prometheus(UNIX_EPOCH + std::time::Duration::from_millis(1_800_000_000_250));
        assert_eq!(
            text,
            PINNED_PROMETHEUS.replace("{version}", env!("CARGO_PKG_VERSION"))
        );
        let whole = pinned_prometheus(UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000));
        assert!(
            whole.ends_with("\niosplit_audit_timestamp_seconds 1800000000\n"),
            "{whole}"
        );
    }

    /// The seed's audit as `check --prometheus` wrote it before it shared serve's writer (#46).
    const PINNED_PROMETHEUS: &str = include_str!("../../tests/fixtures/prometheus/check-seed.prom");

    /// The cap's line says where it comes from and what the hardware
    /// allows, wrapped within the listing's width.
    #[test]
    fn the_cap_line_names_its_source() {
        let disk = |max_sectors_kb, source, optimal_io_size| DiskGeometry {
            name: "sda".to_string(),
            max_sectors_kb,
            max_hw_sectors_kb: 32767,
            optimal_io_size,
            max_sectors_source: Some(source),
            ..DiskGeometry::default()
        };
        let lines = |disk: &DiskGeometry| {
            let mut out = String::new();
            render_disk(&mut out, disk);
            assert!(
                out.lines().all(|line| line.chars().count() <= COLUMNS),
                "{out}"
            );
            out.lines()
                .skip_while(|line| !line.starts_with("  max_sectors "))
                .take_while(|line| line.starts_with("  max_sectors ") || line.starts_with("     "))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            lines(&disk(128, MaxSectorsSource::OptimalIoSize, 131072)),
            "max_sectors 128 KiB (the device's optimal I/O size, by sd's rule on kernels before 6.11; hardware allows 32767 KiB)"
        );
        assert_eq!(
            lines(&disk(4096, MaxSectorsSource::KernelDefaultCap, 131072)),
            "max_sectors 4 MiB (the block layer's default cap, 4 MiB since Linux 6.17; hardware allows 32767 KiB)"
        );
        assert_eq!(
            lines(&disk(32767, MaxSectorsSource::Hardware, 0)),
            "max_sectors 32767 KiB (the hardware's own limit)"
        );
        assert!(lines(&disk(64, MaxSectorsSource::UserOrUnknown, 0))
            .starts_with("max_sectors 64 KiB (not a kernel default: set by a user"));
    }

    #[test]
    fn block_size_column_marks_predictions() {
        assert_eq!(block_size_text(Some(1024), 10, 512), "1024");
        assert_eq!(block_size_text(None, 27_647_865, 512), "≈512 predicted");
    }
}
