//! The devices the user selected with `-d/--device`: resolved, turned into the
//! capture filter, and announced.

use std::path::Path;

use crate::capture::{Capture, CaptureConfig, EventSink, OwnerFilter};
use crate::cli::{self, DeviceSelection};
use crate::geometry::error::GeometryError;
use crate::geometry::resolve::{partitions_in, resolve, ResolvedDevice};
use crate::geometry::DevId;

use super::output;

/// The devices named on the command line (empty: every disk).
pub fn resolve_selection(
    selection: &DeviceSelection,
) -> Result<Vec<ResolvedDevice>, GeometryError> {
    selection.devices.iter().map(|arg| resolve(arg)).collect()
}

/// The capture filter for these devices: their whole disks, and every
/// partition of those disks (block_dirty_buffer reports the partition).
/// What to capture: the devices, and owners when `read_owners`.
pub fn capture_config(devices: &[ResolvedDevice], read_owners: bool) -> CaptureConfig {
    let sysfs = Path::new("/sys");
    let mut traced: Vec<DevId> = Vec::new();
    for device in devices {
        traced.push(device.disk_dev);
        traced.extend(partitions_in(sysfs, &device.disk_name));
    }
    traced.sort();
    traced.dedup();
    CaptureConfig {
        devices: traced,
        read_owners,
        ..CaptureConfig::default()
    }
}

/// The owner filters named on the command line, resolved: cgroup paths to
/// their ids, names to the kernel's 16-byte `comm`.
pub fn owner_filter(selection: &cli::OwnerFilter) -> crate::error::Result<OwnerFilter> {
    use crate::error::Error;
    let mut filter = OwnerFilter {
        pids: selection.pids.clone(),
        ..OwnerFilter::default()
    };
    if !selection.cgroups.is_empty() {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|err| Error::failure(format!("cannot read /proc/self/mountinfo: {err}")))?;
        let mounts = crate::owners::parse_mountinfo(&mountinfo);
        for path in &selection.cgroups {
            let id = crate::owners::cgroup_id(&mounts, path)?;
            filter.cgroups.push(id);
        }
    }
    for name in &selection.comms {
        filter.comms.push(crate::owners::comm_key(name)?);
    }
    Ok(filter)
}

/// Tells the user (on stderr) that tracing has started; scripts wait for this line.
pub fn announce<S: EventSink>(devices: &[ResolvedDevice], capture: &Capture<S>) {
    let attached = capture.probes.iter().filter(|p| p.status.is_ok()).count();
    let what = if devices.is_empty() {
        "every block device".to_string()
    } else {
        devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    output::status(format_args!(
        "tracing {what} ({attached}/{} probes attached, {}); Ctrl-C to stop",
        capture.probes.len(),
        capture.flavor.name()
    ));
}
