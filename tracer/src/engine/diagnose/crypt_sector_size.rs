//! `crypt_sector_size`: dm-crypt encrypting in sectors smaller than the
//! physical block of the disk it lands on (`sector_size` 512, the default of
//! plain tables and of LUKS1, on a 4 KiB disk). Static; live numbers join it.

use super::misaligned_stack::StackAudit;
use super::Check;
use crate::model::{Code, CryptSectorSizeEvidence, Evidence, Finding, LiveEvidence, Severity};

pub(super) struct CryptSectorSize;

impl Check for CryptSectorSize {
    fn code(&self) -> Code {
        Code::CryptSectorSize
    }

    fn audit_stack(&self, audit: &StackAudit<'_>) -> Option<Finding> {
        let (top, stack) = (audit.top, audit.stack);
        let sector = stack.crypt_sector_size?;
        let leg = stack
            .legs
            .iter()
            .filter(|leg| leg.bottom.physical_block_size > sector)
            .max_by_key(|leg| leg.bottom.physical_block_size)?;
        let evidence = CryptSectorSizeEvidence {
            crypt_sector_size: sector,
            bottom_device: leg.bottom.name.clone(),
            physical_block_size: leg.bottom.physical_block_size,
            logical_block_size: top.logical_block_size,
            luks2: stack.uuid.starts_with("CRYPT-LUKS2-"),
            dm_name: stack.dm_name.clone(),
            live: LiveEvidence::default(),
        };
        // It costs CPU and lets sub-block writes through; it moves no data off the grid.
        Some(Finding::new(
            top.name.clone(),
            top.name.clone(),
            Severity::Info,
            Evidence::CryptSectorSize(evidence),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::audit::audit_disk;
    use crate::engine::audit::tests::linear_dm;
    use crate::model::{Code, Evidence, Severity};

    fn crypt(sector: u32, uuid: &str) -> crate::geometry::DiskGeometry {
        let mut dm = linear_dm(8, uuid);
        let stack = dm.stack.as_mut().unwrap();
        stack.kind = "dm-crypt".into();
        stack.crypt_sector_size = Some(sector);
        stack.legs[0].levels[0].via = "crypt".into();
        dm.logical_block_size = sector;
        dm
    }

    #[test]
    fn crypt_sectors_below_the_physical_block_are_named_and_4096_is_clean() {
        let found = audit_disk(&crypt(512, "CRYPT-LUKS2-abc-x"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].code, found[0].severity),
            (Code::CryptSectorSize, Severity::Info)
        );
        let Evidence::CryptSectorSize(evidence) = &found[0].evidence else {
            panic!("{found:?}");
        };
        assert_eq!(
            (evidence.crypt_sector_size, evidence.physical_block_size),
            (512, 4096)
        );
        assert!(evidence.luks2);
        assert!(audit_disk(&crypt(4096, "")).is_empty());
        assert!(
            audit_disk(&linear_dm(8, "")).is_empty(),
            "not crypt, not named"
        );
    }
}
