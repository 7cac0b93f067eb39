//! Tag waits (`block_rq_tag_wait`, Linux 7.2+): submitters that found no
//! free tag on a hardware queue and waited, counted in the kernel per
//! device, hardware queue and tag set. This owns the kernel's running
//! totals and what grew since the last reset.

use std::collections::BTreeMap;

use tracer_common::{TagWaitKey, TagWaits};

use crate::model::TagWaitReport;

#[derive(Debug, Default)]
pub(super) struct TagWaitTally {
    /// The kernel's totals at the last read.
    kernel: BTreeMap<TagWaitKey, TagWaits>,
    /// Waits since the last reset, and the tag set's size at the last one.
    counted: BTreeMap<TagWaitKey, TagWaits>,
}

impl TagWaitTally {
    /// The kernel's running totals: what grew since the last read counts.
    pub(super) fn totals(&mut self, totals: &[(TagWaitKey, TagWaits)]) {
        for (key, now) in totals {
            let before = self.kernel.insert(*key, *now).unwrap_or_default();
            let grown = now.waits.saturating_sub(before.waits);
            if grown > 0 {
                let counted = self.counted.entry(*key).or_default();
                counted.waits += grown;
                counted.nr_tags = now.nr_tags;
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.counted.clear();
    }

    /// The waits on `dev` (kernel `dev_t`), by hardware queue and tag set.
    pub(super) fn on(&self, dev: u32) -> Vec<TagWaitReport> {
        self.counted
            .iter()
            .filter(|(key, waits)| key.dev == dev && waits.waits > 0)
            .map(|(key, waits)| TagWaitReport {
                hctx: key.hctx,
                tags: if key.sched != 0 {
                    "scheduler"
                } else {
                    "driver"
                }
                .to_string(),
                waits: waits.waits,
                nr_tags: waits.nr_tags,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dev: u32, hctx: u32, sched: u32) -> TagWaitKey {
        TagWaitKey {
            dev,
            hctx,
            sched,
            _pad: 0,
        }
    }

    #[test]
    fn waits_grow_from_the_kernels_totals_and_restart_at_a_reset() {
        let mut tally = TagWaitTally::default();
        let disk = 253 << 20;
        tally.totals(&[(
            key(disk, 0, 1),
            TagWaits {
                waits: 5,
                nr_tags: 4,
            },
        )]);
        tally.totals(&[
            (
                key(disk, 0, 1),
                TagWaits {
                    waits: 9,
                    nr_tags: 4,
                },
            ),
            (
                key(disk, 1, 0),
                TagWaits {
                    waits: 2,
                    nr_tags: 16,
                },
            ),
            (
                key(7 << 20, 0, 0),
                TagWaits {
                    waits: 3,
                    nr_tags: 8,
                },
            ),
        ]);
        let waits = tally.on(disk);
        assert_eq!(waits.len(), 2);
        assert_eq!(
            (waits[0].hctx, waits[0].tags.as_str(), waits[0].waits),
            (0, "scheduler", 9)
        );
        assert_eq!(
            (waits[1].tags.as_str(), waits[1].waits, waits[1].nr_tags),
            ("driver", 2, 16)
        );
        tally.clear();
        assert!(tally.on(disk).is_empty());
        // After a reset only what grows counts.
        tally.totals(&[(
            key(disk, 0, 1),
            TagWaits {
                waits: 10,
                nr_tags: 4,
            },
        )]);
        assert_eq!(tally.on(disk)[0].waits, 1);
    }
}
