//! `crypt_sector_size`: what 512-byte encryption sectors cost on a 4 KiB disk.

use super::{WhoPays, Words};
use crate::model::{CryptSectorSizeEvidence, Finding};

/// Who pays: the CPU, eight cipher calls per 4 KiB block, and the disk
/// inside, for its read-modify-writes; no command a fix removes.
pub(super) const WHO_PAYS: WhoPays = WhoPays::NoCommandCost;

pub(super) fn words(finding: &Finding, evidence: &CryptSectorSizeEvidence) -> Words {
    let top = &finding.device;
    let (sector, pbs) = (evidence.crypt_sector_size, evidence.physical_block_size);
    let explanation = format!(
        "{top} is dm-crypt with {sector}-byte encryption sectors over {bottom}, whose physical \
         block is {pbs} bytes: it encrypts each {pbs}-byte block as {pieces} sectors (as many \
         IV and cipher calls), and it takes writes of {lbs} bytes, which {bottom} must \
         read-modify-write.",
        bottom = evidence.bottom_device,
        pieces = pbs / sector.max(1),
        lbs = evidence.logical_block_size,
    );
    let name = if evidence.dm_name.is_empty() {
        top.as_str()
    } else {
        evidence.dm_name.as_str()
    };
    let fix = if evidence.luks2 {
        format!(
            "Re-encrypt in place with {pbs}-byte sectors (LUKS2, cryptsetup 2.2 or later), with a \
             backup first: `cryptsetup reencrypt --sector-size {pbs} <device under {name}>`; the \
             filesystem's block size must be at least {pbs} bytes."
        )
    } else {
        format!(
            "Back up what is on {top} first: a different sector size encrypts differently, so the \
             data must be restored. Recreate it with {pbs}-byte sectors: `cryptsetup luksFormat \
             --type luks2 --sector-size {pbs}` (or `sector_size:{pbs}` in a plain table), then \
             restore."
        )
    };
    Words { explanation, fix }
}

#[cfg(test)]
mod tests {
    use crate::explain::{who_pays, WhoPays};
    use crate::model::{
        Code, CryptSectorSizeEvidence, Evidence, LiveEvidence, WhatIf, WhatIfScope,
    };

    /// Small encryption sectors cost CPU, not commands a fix removes: no
    /// what-if to time, and no workload `run` would name as paying more.
    #[test]
    fn nobody_pays_it_in_commands() {
        assert_eq!(who_pays(Code::CryptSectorSize), WhoPays::NoCommandCost);
        let mut evidence = Evidence::CryptSectorSize(CryptSectorSizeEvidence {
            crypt_sector_size: 512,
            bottom_device: "sda".into(),
            physical_block_size: 4096,
            logical_block_size: 512,
            luks2: true,
            dm_name: "secret".into(),
            live: LiveEvidence::default(),
        });
        assert_eq!(evidence.what_if_scope(), WhatIfScope::NoWhatIf);
        evidence.set_what_if(WhatIf::default());
        assert_eq!(evidence.what_if(), None);
    }
}
