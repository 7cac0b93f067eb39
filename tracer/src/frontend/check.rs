//! `iosplit-trace check`: a static geometry audit. Reads sysfs (and BLKBSZGET
//! where permitted), runs the engine's audit, and prints the limits, the
//! partition table and the diagnoses. No tracing, no BPF, no root needed.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::CheckArgs;
use crate::engine::audit::{self, Placement};
use crate::error::Result;
use crate::explain;
use crate::geometry::error::GeometryError;
use crate::geometry::ioctl::{BlockSizeProbe, DevNodeProbe};
use crate::geometry::resolve::resolve_in;
use crate::geometry::{predicted_block_size, sysfs, DiskGeometry};
use crate::model::{DeviceReport, Diagnosis, Measures, PartitionReport, SCHEMA_VERSION};

use super::output::{Document, Format, Output};

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
    Output::stdout().print(&report, Format::from_flags(args.json, false))?;
    // Findings are the output, not a failure: exit 0 either way.
    Ok(ExitCode::SUCCESS)
}

/// Audits the named devices (a partition stands for its disk), or every disk
/// with a non-zero size when none are named.
pub fn check_in(
    sysfs_root: &Path,
    devices: &[String],
    probe: &dyn BlockSizeProbe,
) -> std::result::Result<CheckReport, GeometryError> {
    let disks = if devices.is_empty() {
        let mut disks = sysfs::read_disks_in(sysfs_root, None, probe)?;
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
        sysfs::read_disks_in(sysfs_root, Some(&names), probe)?
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
        name: disk.name.clone(),
        dev: dev_text(disk.dev),
        partitions: disk
            .partitions
            .iter()
            .map(|part| PartitionReport {
                name: part.name.clone(),
                dev: dev_text(part.dev),
                geometry: part.clone(),
                measures: Measures::default(),
                gone: false,
            })
            .collect(),
        measures: Measures::default(),
        geometry: disk,
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
        human_size(disk.size_sectors.saturating_mul(512))
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
        human_size(u64::from(disk.max_segment_size))
    );
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

/// "20.0 GiB": one decimal in the largest binary unit that fits.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(41_943_040 * 512), "20.0 GiB");
        assert_eq!(human_size(u64::from(u32::MAX)), "4.0 GiB");
        assert_eq!(human_size(100), "100 B");
    }

    #[test]
    fn block_size_column_marks_predictions() {
        assert_eq!(block_size_text(Some(1024), 10, 512), "1024");
        assert_eq!(block_size_text(None, 27_647_865, 512), "≈512 predicted");
    }
}
