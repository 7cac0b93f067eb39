//! When the world changes under a trace: disks and partitions that come and
//! go, and events the kernel could not deliver.

use crate::geometry::{DevId, DiskGeometry};

use super::Engine;

impl Engine {
    /// Installs the disks present now (as [`Engine::set_disks`] does) and marks
    /// every disk and partition with known geometry that is not among them as
    /// gone; one that comes back (same device number) is present again. The
    /// measures of a gone device are kept.
    pub fn refresh_disks(&mut self, disks: Vec<DiskGeometry>) {
        let present_disks: Vec<u32> = disks
            .iter()
            .filter_map(|disk| disk.dev.map(DevId::to_kernel))
            .collect();
        let present_parts: Vec<u32> = disks
            .iter()
            .flat_map(|disk| &disk.partitions)
            .filter_map(|part| part.dev.map(DevId::to_kernel))
            .collect();
        self.set_disks(disks);
        for device in &mut self.devices {
            // Only a device seen in sysfs before can be missing from it now.
            device.gone =
                device.known && device.dev.is_some_and(|dev| !present_disks.contains(&dev));
            for part in &mut device.parts {
                part.gone =
                    device.gone || (part.geometry.size != 0 && !present_parts.contains(&part.dev));
            }
        }
    }

    /// The kernel dropped events (a ring was full). Any chain or command in
    /// flight may have lost one, so none of them feeds the histograms: each
    /// chain is counted incomplete when it ends.
    pub fn events_lost(&mut self) {
        for io in self.user_ios.values_mut() {
            io.incomplete = true;
            io.in_ring_drop = true;
        }
        for command in self.commands.values_mut() {
            command.lost = true;
        }
    }
}
