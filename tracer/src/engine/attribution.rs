//! Who caused the I/O: every user I/O is attributed, at `block_bio_queue`,
//! to its process, its cgroup and its file (the [`Owner`] the probe read),
//! and per owner and device the engine keeps the measures users compare
//! devices by. Pure, like the rest of the engine: ids in, ids out; paths
//! are resolved by the frontend (`crate::owners`).
//!
//! Bounded: each view keeps at most [`OWNER_CAPACITY`] (owner, device)
//! entries; I/O of owners beyond that is summed into the device's `other`
//! entry. Entries are created on first sight (their histograms allocated
//! once); after that an event costs a hash lookup per view and no
//! allocation. A reset zeroes the entries but keeps them, so the slots that
//! in-flight user I/Os point at stay valid.

use hdrhistogram::Histogram;
use tracer_common::{owner_flags, Owner, COMM_BYTES};

use super::table::FastMap;
use crate::model::{Dominant, OwnerEntry, OwnerKnown, OwnerMeasures};

use super::stats::distribution;

/// (owner, device) entries each view keeps before folding into `other`.
pub const OWNER_CAPACITY: usize = 256;
/// Entries each view reports, by commands; the rest of a device is summed into `other`.
pub const TOP_OWNERS: usize = 20;

/// One significant digit (about 6% resolution) keeps an entry's four
/// histograms near 16 KiB, so the bounded tables stay a few MiB.
const OWNER_HISTOGRAM_SIGFIG: u8 = 1;
const OWNER_HISTOGRAM_HIGH: u64 = 1 << 36;

fn owner_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, OWNER_HISTOGRAM_HIGH, OWNER_HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// A process view key: the submitter, or that it was a kernel thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessKey {
    Known { tgid: u32, comm: [u8; COMM_BYTES] },
    KernelThread,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupKey {
    Known(u64),
    Unknown,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKey {
    Known { dev: u32, ino: u64, direct: bool },
    NoFile,
    Unknown,
    Other,
}

trait ViewKey: Copy + Eq + std::hash::Hash {
    const OTHER: Self;
}
impl ViewKey for ProcessKey {
    const OTHER: Self = ProcessKey::Other;
}
impl ViewKey for CgroupKey {
    const OTHER: Self = CgroupKey::Other;
}
impl ViewKey for FileKey {
    const OTHER: Self = FileKey::Other;
}

/// The three keys of one queued bio.
pub fn keys_of(owner: &Owner, tgid: u32) -> (ProcessKey, CgroupKey, FileKey) {
    let process = if owner.flags & owner_flags::KERNEL_THREAD != 0 {
        ProcessKey::KernelThread
    } else {
        // Without COMM (classic probes) the comm stays empty; the tgid is always known.
        ProcessKey::Known {
            tgid,
            comm: owner.comm,
        }
    };
    let cgroup = if owner.flags & owner_flags::CGROUP != 0 {
        CgroupKey::Known(owner.cgroup)
    } else {
        CgroupKey::Unknown
    };
    let file = if owner.flags & (owner_flags::FILE | owner_flags::FILE_DIRECT) != 0 {
        FileKey::Known {
            dev: owner.file_dev,
            ino: owner.ino,
            direct: owner.flags & owner_flags::FILE_DIRECT != 0,
        }
    } else if owner.flags & owner_flags::ANONYMOUS_PAGE != 0 {
        FileKey::NoFile
    } else {
        FileKey::Unknown
    };
    (process, cgroup, file)
}

/// Counters of one (owner, device).
pub struct OwnerStats {
    pub user_ios: u64,
    pub commands: u64,
    pub bytes: u64,
    pub splits: u64,
    pub split_user_ios: u64,
    pub merges: u64,
    pub commands_per_io: Histogram<u64>,
    pub queue_to_complete_us: Histogram<u64>,
    pub queue_to_issue_us: Histogram<u64>,
    pub issue_to_complete_us: Histogram<u64>,
}

impl OwnerStats {
    fn new() -> OwnerStats {
        OwnerStats {
            user_ios: 0,
            commands: 0,
            bytes: 0,
            splits: 0,
            split_user_ios: 0,
            merges: 0,
            commands_per_io: owner_histogram(),
            queue_to_complete_us: owner_histogram(),
            queue_to_issue_us: owner_histogram(),
            issue_to_complete_us: owner_histogram(),
        }
    }

    fn clear(&mut self) {
        self.user_ios = 0;
        self.commands = 0;
        self.bytes = 0;
        self.splits = 0;
        self.split_user_ios = 0;
        self.merges = 0;
        self.commands_per_io.reset();
        self.queue_to_complete_us.reset();
        self.queue_to_issue_us.reset();
        self.issue_to_complete_us.reset();
    }

    fn absorb(&mut self, other: &OwnerStats) {
        self.user_ios += other.user_ios;
        self.commands += other.commands;
        self.bytes += other.bytes;
        self.splits += other.splits;
        self.split_user_ios += other.split_user_ios;
        self.merges += other.merges;
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.commands_per_io.add(&other.commands_per_io);
        let _ = self.queue_to_complete_us.add(&other.queue_to_complete_us);
        let _ = self.queue_to_issue_us.add(&other.queue_to_issue_us);
        let _ = self.issue_to_complete_us.add(&other.issue_to_complete_us);
    }

    fn is_empty(&self) -> bool {
        self.user_ios == 0 && self.commands == 0 && self.splits == 0 && self.merges == 0
    }

    /// The counters alone, no distributions: cheap enough to poll.
    pub fn counts_only(&self) -> OwnerMeasures {
        let ratio = |num: u64| crate::model::ratio(num, self.user_ios);
        OwnerMeasures {
            user_ios: self.user_ios,
            commands: self.commands,
            bytes: self.bytes,
            splits: self.splits,
            split_user_ios: self.split_user_ios,
            merges: self.merges,
            amplification: ratio(self.commands),
            split_share: ratio(self.split_user_ios),
            merge_share: ratio(self.merges),
            ..OwnerMeasures::default()
        }
    }

    pub fn to_model(&self) -> OwnerMeasures {
        let q2d = distribution(&self.queue_to_issue_us, 1);
        let d2c = distribution(&self.issue_to_complete_us, 1);
        OwnerMeasures {
            commands_per_io: distribution(&self.commands_per_io, 1),
            queue_to_complete_us: distribution(&self.queue_to_complete_us, 1),
            dominant: Dominant::of(&q2d, &d2c),
            queue_to_issue_us: q2d,
            issue_to_complete_us: d2c,
            ..self.counts_only()
        }
    }
}

/// A (disk, partition) pair as the engine numbers them.
pub type Place = (u32, u32);

struct Entry<K> {
    key: K,
    place: Place,
    stats: OwnerStats,
}

/// One view (processes, cgroups or files): its entries and their index.
struct View<K> {
    index: FastMap<(K, Place), u32>,
    entries: Vec<Entry<K>>,
    /// Entries of real owners (the `other` entries do not count).
    owners: usize,
    capacity: usize,
}

impl<K: ViewKey> View<K> {
    fn new(capacity: usize) -> View<K> {
        let mut index = FastMap::default();
        index.reserve(capacity + 16);
        View {
            index,
            entries: Vec::with_capacity(capacity + 16),
            owners: 0,
            capacity,
        }
    }

    /// The slot of `key` on `place`; past capacity, the place's `other`.
    fn slot(&mut self, key: K, place: Place) -> u32 {
        if let Some(&slot) = self.index.get(&(key, place)) {
            return slot;
        }
        let key = if self.owners >= self.capacity {
            K::OTHER
        } else {
            key
        };
        if let Some(&slot) = self.index.get(&(key, place)) {
            return slot;
        }
        if key != K::OTHER {
            self.owners += 1;
        }
        let slot = self.entries.len() as u32;
        self.entries.push(Entry {
            key,
            place,
            stats: OwnerStats::new(),
        });
        self.index.insert((key, place), slot);
        slot
    }

    fn stats(&mut self, slot: u32) -> Option<&mut OwnerStats> {
        self.entries
            .get_mut(slot as usize)
            .map(|entry| &mut entry.stats)
    }

    fn clear(&mut self) {
        for entry in &mut self.entries {
            entry.stats.clear();
        }
    }

    /// Every non-empty entry (the engine's `other` ones included), by reference.
    fn nonempty(&self) -> impl Iterator<Item = (K, Place, &OwnerStats)> {
        self.entries
            .iter()
            .filter(|entry| !entry.stats.is_empty())
            .map(|entry| (entry.key, entry.place, &entry.stats))
    }

    /// The top `top` entries by commands (then user I/Os), and per place
    /// the rest summed into `other`; with how many owners were folded.
    fn report(&self, top: usize) -> (Vec<(K, Place, OwnerStats)>, u64) {
        let mut order: Vec<&Entry<K>> = self
            .entries
            .iter()
            .filter(|entry| !entry.stats.is_empty())
            .collect();
        order.sort_by(|a, b| {
            let other = |entry: &Entry<K>| entry.key == K::OTHER;
            (other(a), b.stats.commands, b.stats.user_ios).cmp(&(
                other(b),
                a.stats.commands,
                a.stats.user_ios,
            ))
        });
        let mut shown = Vec::new();
        let mut others: Vec<(Place, OwnerStats)> = Vec::new();
        let mut folded = 0;
        for entry in order {
            if entry.key != K::OTHER && shown.len() < top {
                let mut stats = OwnerStats::new();
                stats.absorb(&entry.stats);
                shown.push((entry.key, entry.place, stats));
                continue;
            }
            if entry.key != K::OTHER {
                folded += 1;
            }
            match others.iter_mut().find(|(place, _)| *place == entry.place) {
                Some((_, stats)) => stats.absorb(&entry.stats),
                None => {
                    let mut stats = OwnerStats::new();
                    stats.absorb(&entry.stats);
                    others.push((entry.place, stats));
                }
            }
        }
        shown.extend(
            others
                .into_iter()
                .map(|(place, stats)| (K::OTHER, place, stats)),
        );
        (shown, folded)
    }
}

/// Slots of one user I/O's owners in the three views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerSlots {
    pub process: u32,
    pub cgroup: u32,
    pub file: u32,
}

impl OwnerSlots {
    /// No owner (an I/O from before attribution, or a fallback target).
    pub const NONE: OwnerSlots = OwnerSlots {
        process: u32::MAX,
        cgroup: u32::MAX,
        file: u32::MAX,
    };
}

impl Default for OwnerSlots {
    fn default() -> Self {
        OwnerSlots::NONE
    }
}

/// Entries resolved by view, before the frontend names them.
pub struct AttributionTables {
    processes: View<ProcessKey>,
    cgroups: View<CgroupKey>,
    files: View<FileKey>,
    /// Off when the probes read no owners: no report shows the tables then,
    /// and keeping them cost three lookups and up to nine histogram records per I/O.
    kept: bool,
}

impl AttributionTables {
    pub fn new(capacity: usize) -> AttributionTables {
        AttributionTables {
            processes: View::new(capacity),
            cgroups: View::new(capacity),
            files: View::new(capacity),
            kept: true,
        }
    }

    /// Whether I/O queued from now on is attributed.
    pub fn keep(&mut self, kept: bool) {
        self.kept = kept;
    }

    /// A bio queued by `owner` (as `tgid`) on `place`, `sectors` long.
    pub fn queue(&mut self, owner: &Owner, tgid: u32, place: Place, bytes: u64) -> OwnerSlots {
        if !self.kept {
            return OwnerSlots::NONE;
        }
        let (process, cgroup, file) = keys_of(owner, tgid);
        let slots = OwnerSlots {
            process: self.processes.slot(process, place),
            cgroup: self.cgroups.slot(cgroup, place),
            file: self.files.slot(file, place),
        };
        self.each(slots, |stats| {
            stats.user_ios += 1;
            stats.bytes += bytes;
        });
        slots
    }

    /// Applies `update` to the three entries of `slots`.
    #[inline]
    pub fn each(&mut self, slots: OwnerSlots, mut update: impl FnMut(&mut OwnerStats)) {
        if let Some(stats) = self.processes.stats(slots.process) {
            update(stats);
        }
        if let Some(stats) = self.cgroups.stats(slots.cgroup) {
            update(stats);
        }
        if let Some(stats) = self.files.stats(slots.file) {
            update(stats);
        }
    }

    pub fn clear(&mut self) {
        self.processes.clear();
        self.cgroups.clear();
        self.files.clear();
    }

    /// The top `top` owners of each view, named by ids; `device` names a place.
    /// Every entry of every view with its counters only (no histogram is
    /// copied or summarized): what `serve --by` polls at each scrape.
    pub fn counts(&self, device: impl Fn(Place) -> String) -> crate::model::Attribution {
        crate::model::Attribution {
            processes: self
                .processes
                .nonempty()
                .map(|(key, place, stats)| process_entry(key, device(place), stats.counts_only()))
                .collect(),
            cgroups: self
                .cgroups
                .nonempty()
                .map(|(key, place, stats)| cgroup_entry(key, device(place), stats.counts_only()))
                .collect(),
            files: self
                .files
                .nonempty()
                .map(|(key, place, stats)| file_entry(key, device(place), stats.counts_only()))
                .collect(),
            folded: crate::model::FoldedOwners::default(),
            text_views: Vec::new(),
        }
    }

    pub fn report(
        &self,
        top: usize,
        device: impl Fn(Place) -> String,
    ) -> crate::model::Attribution {
        let (processes, folded_processes) = self.processes.report(top);
        let (cgroups, folded_cgroups) = self.cgroups.report(top);
        let (files, folded_files) = self.files.report(top);
        crate::model::Attribution {
            processes: processes
                .into_iter()
                .map(|(key, place, stats)| process_entry(key, device(place), stats.to_model()))
                .collect(),
            cgroups: cgroups
                .into_iter()
                .map(|(key, place, stats)| cgroup_entry(key, device(place), stats.to_model()))
                .collect(),
            files: files
                .into_iter()
                .map(|(key, place, stats)| file_entry(key, device(place), stats.to_model()))
                .collect(),
            folded: crate::model::FoldedOwners {
                processes: folded_processes,
                cgroups: folded_cgroups,
                files: folded_files,
            },
            text_views: Vec::new(),
        }
    }
}

fn process_entry(key: ProcessKey, device: String, measures: OwnerMeasures) -> OwnerEntry {
    match key {
        ProcessKey::Known { tgid, comm } => {
            let length = comm.iter().position(|&b| b == 0).unwrap_or(COMM_BYTES);
            let name = String::from_utf8_lossy(&comm[..length]).into_owned();
            let mut entry = OwnerEntry::new(OwnerKnown::Known, device, measures);
            entry.pid = Some(tgid);
            entry.comm = (!name.is_empty()).then_some(name);
            entry
        }
        ProcessKey::KernelThread => OwnerEntry::new(OwnerKnown::KernelThread, device, measures),
        ProcessKey::Other => OwnerEntry::new(OwnerKnown::Other, device, measures),
    }
}

fn cgroup_entry(key: CgroupKey, device: String, measures: OwnerMeasures) -> OwnerEntry {
    match key {
        CgroupKey::Known(id) => {
            let mut entry = OwnerEntry::new(OwnerKnown::Known, device, measures);
            entry.cgroup_id = Some(id);
            entry
        }
        CgroupKey::Unknown => OwnerEntry::new(OwnerKnown::Unknown, device, measures),
        CgroupKey::Other => OwnerEntry::new(OwnerKnown::Other, device, measures),
    }
}

fn file_entry(key: FileKey, device: String, measures: OwnerMeasures) -> OwnerEntry {
    match key {
        FileKey::Known { dev, ino, direct } => {
            let mut entry = OwnerEntry::new(OwnerKnown::Known, device, measures);
            entry.inode = Some(ino);
            entry.dev = Some(crate::geometry::DevId::from_kernel(dev).to_string());
            entry.direct = direct;
            entry
        }
        FileKey::NoFile => OwnerEntry::new(OwnerKnown::NoFile, device, measures),
        FileKey::Unknown => OwnerEntry::new(OwnerKnown::Unknown, device, measures),
        FileKey::Other => OwnerEntry::new(OwnerKnown::Other, device, measures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(comm: &str, cgroup: u64, ino: u64, flags: u32) -> Owner {
        let mut name = [0; COMM_BYTES];
        name[..comm.len()].copy_from_slice(comm.as_bytes());
        Owner {
            comm: name,
            cgroup,
            ino,
            file_dev: (259 << 20) | 1,
            flags,
        }
    }

    const ALL: u32 = owner_flags::COMM | owner_flags::CGROUP | owner_flags::FILE;

    #[test]
    fn a_kernel_thread_is_not_a_process_but_its_cgroup_and_file_stay() {
        let writeback = owner("kworker/u8:1", 7, 12, ALL | owner_flags::KERNEL_THREAD);
        let (process, cgroup, file) = keys_of(&writeback, 42);
        assert_eq!(process, ProcessKey::KernelThread);
        assert_eq!(cgroup, CgroupKey::Known(7));
        assert!(matches!(
            file,
            FileKey::Known {
                ino: 12,
                direct: false,
                ..
            }
        ));
        let classic = keys_of(&Owner::UNKNOWN, 42);
        assert_eq!(classic.1, CgroupKey::Unknown);
        assert_eq!(classic.2, FileKey::Unknown);
        let direct = keys_of(
            &owner(
                "dd",
                7,
                13,
                owner_flags::ANONYMOUS_PAGE | owner_flags::FILE_DIRECT,
            ),
            42,
        );
        assert!(matches!(
            direct.2,
            FileKey::Known {
                ino: 13,
                direct: true,
                ..
            }
        ));
        let anonymous = keys_of(&owner("dd", 7, 0, owner_flags::ANONYMOUS_PAGE), 42);
        assert_eq!(anonymous.2, FileKey::NoFile);
    }

    #[test]
    fn past_capacity_owners_fold_into_their_devices_other_and_are_counted() {
        let mut tables = AttributionTables::new(2);
        let place = (0, 1);
        let mut slots = Vec::new();
        for tgid in 1..=4u32 {
            slots.push(tables.queue(&owner("w", u64::from(tgid), 1, ALL), tgid, place, 4096));
        }
        // The third and fourth process share the `other` slot.
        assert_eq!(slots[2].process, slots[3].process);
        assert_ne!(slots[0].process, slots[1].process);
        for (i, slot) in slots.iter().enumerate() {
            for _ in 0..=i {
                tables.each(*slot, |stats| stats.commands += 1);
            }
        }
        let report = tables.report(1, |(disk, part)| format!("d{disk}p{part}"));
        let pids: Vec<Option<u32>> = report.processes.iter().map(|e| e.pid).collect();
        // Top 1 by commands is tgid 2 (2 commands); tgid 1 is folded at report
        // time; 3 and 4 were folded in the table.
        assert_eq!(pids, [Some(2), None]);
        let other = &report.processes[1];
        assert_eq!(other.owner, OwnerKnown::Other);
        assert_eq!(other.device, "d0p1");
        assert_eq!(other.measures.user_ios, 3);
        assert_eq!(other.measures.commands, 1 + 3 + 4);
        assert_eq!(report.folded.processes, 1);
        // One file for all four: never folded.
        assert_eq!(report.files.len(), 1);
        assert_eq!(report.files[0].measures.bytes, 4 * 4096);
    }

    #[test]
    fn the_same_owner_on_two_devices_is_two_entries_and_a_reset_keeps_slots() {
        let mut tables = AttributionTables::new(8);
        let dd = owner("dd", 3, 9, ALL);
        let first = tables.queue(&dd, 10, (0, 1), 512);
        let second = tables.queue(&dd, 10, (0, 2), 512);
        assert_ne!(first.cgroup, second.cgroup);
        assert_eq!(tables.queue(&dd, 10, (0, 1), 512), first);
        tables.clear();
        assert_eq!(tables.queue(&dd, 10, (0, 1), 512), first);
        let report = tables.report(TOP_OWNERS, |_| String::new());
        assert_eq!(report.cgroups.len(), 1, "the emptied entry is not shown");
        assert_eq!(report.cgroups[0].measures.user_ios, 1);
        assert_eq!(report.cgroups[0].cgroup_id, Some(3));
    }

    #[test]
    fn queue_or_device_time_dominates_by_mean() {
        let mut stats = OwnerStats::new();
        assert_eq!(stats.to_model().dominant, None);
        stats.queue_to_issue_us.saturating_record(900);
        stats.issue_to_complete_us.saturating_record(100);
        assert_eq!(stats.to_model().dominant, Some(Dominant::Queue));
        stats.issue_to_complete_us.saturating_record(5000);
        assert_eq!(stats.to_model().dominant, Some(Dominant::Device));
    }
}
