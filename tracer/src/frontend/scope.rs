//! Resolves `--device` arguments into the capture filter.

use crate::capture::CaptureConfig;
use crate::cli::Scope;
use crate::error::Result;
use crate::geometry::resolve::{resolve, ResolvedDevice};

/// The devices named on the command line (empty: every disk).
pub fn resolve_scope(scope: &Scope) -> Result<Vec<ResolvedDevice>> {
    scope.devices.iter().map(|arg| resolve(arg)).collect()
}

/// The capture filter for these devices: their whole disks.
pub fn capture_config(devices: &[ResolvedDevice]) -> CaptureConfig {
    let mut disks: Vec<_> = devices.iter().map(|d| d.disk_dev).collect();
    disks.sort();
    disks.dedup();
    CaptureConfig {
        devices: disks,
        ..CaptureConfig::default()
    }
}
