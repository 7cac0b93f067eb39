//! Who caused the I/O: every user I/O is attributed, at `block_bio_queue`,
//! to its process, its cgroup and its file (the [`Owner`] the probe read),
//! and per owner and device the engine keeps the measures users compare
//! devices by. Pure, like the rest of the engine: ids in, ids out; paths
//! are resolved by the frontend (`crate::owners`).
//!
//! A user I/O updates one **combination** of its three entries (process,
//! cgroup, file on its device), not the three: consecutive I/O nearly
//! always shares one, so a queued bio of the same owners as the last costs
//! no lookup, and each measure is recorded once, not three times. The views
//! sum their combinations when read.
//!
//! Bounded: each view keeps at most [`OWNER_CAPACITY`] (owner, device)
//! entries; I/O of owners beyond that is summed into the device's `other`
//! entry. Combinations are bounded too (`3 ×` that); past them, I/O goes to
//! the device's (other, other, other). Entries are created on first sight
//! (a combination's histograms allocated once); after that an event costs
//! no allocation. A reset zeroes the combinations but keeps them, so the
//! slots that in-flight user I/Os point at stay valid.

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
        self.absorb_counts(other);
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.commands_per_io.add(&other.commands_per_io);
        let _ = self.queue_to_complete_us.add(&other.queue_to_complete_us);
        let _ = self.queue_to_issue_us.add(&other.queue_to_issue_us);
        let _ = self.issue_to_complete_us.add(&other.issue_to_complete_us);
    }

    fn absorb_counts(&mut self, other: &OwnerStats) {
        self.user_ios += other.user_ios;
        self.commands += other.commands;
        self.bytes += other.bytes;
        self.splits += other.splits;
        self.split_user_ios += other.split_user_ios;
        self.merges += other.merges;
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

/// One view (processes, cgroups or files): its (owner, place) entries and
/// their index; their measures are in the combinations.
struct View<K> {
    index: FastMap<(K, Place), u32>,
    entries: Vec<(K, Place)>,
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
        self.entries.push((key, place));
        self.index.insert((key, place), slot);
        slot
    }

    /// Every entry whose `sums` (its combinations' measures, by slot) are
    /// not empty, the engine's `other` ones included.
    fn nonempty<'a>(
        &'a self,
        sums: &'a [OwnerStats],
    ) -> impl Iterator<Item = (K, Place, &'a OwnerStats)> + 'a {
        self.entries
            .iter()
            .zip(sums)
            .filter(|(_, stats)| !stats.is_empty())
            .map(|(&(key, place), stats)| (key, place, stats))
    }

    /// The top `top` entries by commands (then user I/Os), and per place
    /// the rest summed into `other`; with how many owners were folded.
    fn report(&self, sums: Vec<OwnerStats>, top: usize) -> (Vec<(K, Place, OwnerStats)>, u64) {
        let mut order: Vec<(K, Place, OwnerStats)> = self
            .entries
            .iter()
            .zip(sums)
            .filter(|(_, stats)| !stats.is_empty())
            .map(|(&(key, place), stats)| (key, place, stats))
            .collect();
        order.sort_by(|a, b| {
            let other = |entry: &(K, Place, OwnerStats)| entry.0 == K::OTHER;
            (other(a), b.2.commands, b.2.user_ios).cmp(&(other(b), a.2.commands, a.2.user_ios))
        });
        let mut shown = Vec::new();
        let mut others: Vec<(Place, OwnerStats)> = Vec::new();
        let mut folded = 0;
        for (key, place, stats) in order {
            if key != K::OTHER && shown.len() < top {
                shown.push((key, place, stats));
                continue;
            }
            if key != K::OTHER {
                folded += 1;
            }
            match others.iter_mut().find(|(at, _)| *at == place) {
                Some((_, sum)) => sum.absorb(&stats),
                None => others.push((place, stats)),
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

/// One user I/O's owners: the slot of its combination of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerSlots {
    combo: u32,
}

impl OwnerSlots {
    /// No owner (an I/O from before attribution, or a fallback target).
    pub const NONE: OwnerSlots = OwnerSlots { combo: u32::MAX };
}

/// The process, cgroup and file entries (their slots in the views) of one
/// combination.
type Trio = [u32; 3];

/// The measures of the I/O of one (process, cgroup, file) combination.
struct Combo {
    entries: Trio,
    stats: OwnerStats,
}

/// The last queued bio's keys and place, and their combination.
#[derive(Clone, Copy)]
struct LastQueued {
    keys: (ProcessKey, CgroupKey, FileKey),
    place: Place,
    slots: OwnerSlots,
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
    combos: Vec<Combo>,
    combo_index: FastMap<Trio, u32>,
    combo_capacity: usize,
    last: Option<LastQueued>,
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
            combos: Vec::new(),
            combo_index: FastMap::default(),
            combo_capacity: 3 * capacity,
            last: None,
            kept: true,
        }
    }

    /// Whether I/O queued from now on is attributed.
    pub fn keep(&mut self, kept: bool) {
        self.kept = kept;
    }

    /// The owners of a bio queued by `owner` (as `tgid`) on `place`; the
    /// accounting counts it to them.
    pub fn owners_of(&mut self, owner: &Owner, tgid: u32, place: Place) -> OwnerSlots {
        if !self.kept {
            return OwnerSlots::NONE;
        }
        let keys = keys_of(owner, tgid);
        match self.last {
            Some(last) if last.keys == keys && last.place == place => last.slots,
            _ => {
                let slots = self.combination(keys, place);
                self.last = Some(LastQueued { keys, place, slots });
                slots
            }
        }
    }

    /// The combination of these owners on `place`, made on first sight;
    /// past the combinations' bound, the place's (other, other, other).
    fn combination(
        &mut self,
        (process, cgroup, file): (ProcessKey, CgroupKey, FileKey),
        place: Place,
    ) -> OwnerSlots {
        let mut entries = [
            self.processes.slot(process, place),
            self.cgroups.slot(cgroup, place),
            self.files.slot(file, place),
        ];
        if let Some(&combo) = self.combo_index.get(&entries) {
            return OwnerSlots { combo };
        }
        if self.combos.len() >= self.combo_capacity {
            entries = [
                self.processes.slot(ProcessKey::OTHER, place),
                self.cgroups.slot(CgroupKey::OTHER, place),
                self.files.slot(FileKey::OTHER, place),
            ];
            if let Some(&combo) = self.combo_index.get(&entries) {
                return OwnerSlots { combo };
            }
        }
        let combo = self.combos.len() as u32;
        self.combos.push(Combo {
            entries,
            stats: OwnerStats::new(),
        });
        self.combo_index.insert(entries, combo);
        OwnerSlots { combo }
    }

    /// Applies `update` to the measures of `slots`' combination.
    #[inline]
    pub fn each(&mut self, slots: OwnerSlots, update: impl FnOnce(&mut OwnerStats)) {
        if let Some(combo) = self.combos.get_mut(slots.combo as usize) {
            update(&mut combo.stats);
        }
    }

    pub fn clear(&mut self) {
        for combo in &mut self.combos {
            combo.stats.clear();
        }
    }

    /// Each entry of view `view` (0 processes, 1 cgroups, 2 files) with its
    /// combinations' measures summed; `histograms` false sums the counters only.
    fn sums(&self, view: usize, entries: usize, histograms: bool) -> Vec<OwnerStats> {
        let mut sums: Vec<OwnerStats> = (0..entries).map(|_| OwnerStats::new()).collect();
        for combo in &self.combos {
            if let Some(sum) = sums.get_mut(combo.entries[view] as usize) {
                match histograms {
                    true => sum.absorb(&combo.stats),
                    false => sum.absorb_counts(&combo.stats),
                }
            }
        }
        sums
    }

    /// The top `top` owners of each view, named by ids; `device` names a place.
    /// Every entry of every view with its counters only (no histogram is
    /// copied or summarized): what `serve --by` polls at each scrape.
    pub fn counts(&self, device: impl Fn(Place) -> String) -> crate::model::Attribution {
        let processes = self.sums(0, self.processes.entries.len(), false);
        let cgroups = self.sums(1, self.cgroups.entries.len(), false);
        let files = self.sums(2, self.files.entries.len(), false);
        crate::model::Attribution {
            processes: self
                .processes
                .nonempty(&processes)
                .map(|(key, place, stats)| process_entry(key, device(place), stats.counts_only()))
                .collect(),
            cgroups: self
                .cgroups
                .nonempty(&cgroups)
                .map(|(key, place, stats)| cgroup_entry(key, device(place), stats.counts_only()))
                .collect(),
            files: self
                .files
                .nonempty(&files)
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
        let sums = |view: usize, entries: usize| self.sums(view, entries, true);
        let (processes, folded_processes) = self
            .processes
            .report(sums(0, self.processes.entries.len()), top);
        let (cgroups, folded_cgroups) = self
            .cgroups
            .report(sums(1, self.cgroups.entries.len()), top);
        let (files, folded_files) = self.files.report(sums(2, self.files.entries.len()), top);
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

    impl AttributionTables {
        /// A bio's owners, counted as the accounting counts a queue.
        fn queue(&mut self, owner: &Owner, tgid: u32, place: Place, bytes: u64) -> OwnerSlots {
            let slots = self.owners_of(owner, tgid, place);
            self.each(slots, |stats| {
                stats.user_ios += 1;
                stats.bytes += bytes;
            });
            slots
        }
    }

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
        let process = |slot: &OwnerSlots| tables.combos[slot.combo as usize].entries[0];
        assert_eq!(process(&slots[2]), process(&slots[3]));
        assert_ne!(process(&slots[0]), process(&slots[1]));
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
        let cgroup = |slot: OwnerSlots| tables.combos[slot.combo as usize].entries[1];
        assert_ne!(cgroup(first), cgroup(second));
        assert_eq!(tables.queue(&dd, 10, (0, 1), 512), first);
        tables.clear();
        assert_eq!(tables.queue(&dd, 10, (0, 1), 512), first);
        let report = tables.report(TOP_OWNERS, |_| String::new());
        assert_eq!(report.cgroups.len(), 1, "the emptied entry is not shown");
        assert_eq!(report.cgroups[0].measures.user_ios, 1);
        assert_eq!(report.cgroups[0].cgroup_id, Some(3));
    }

    #[test]
    fn each_view_sums_the_combinations_its_entries_are_in() {
        let mut tables = AttributionTables::new(8);
        let place = (0, 1);
        let a = tables.queue(&owner("dd", 3, 1, ALL), 10, place, 4096);
        let b = tables.queue(&owner("dd", 3, 2, ALL), 10, place, 4096);
        let c = tables.queue(&owner("cp", 3, 2, ALL), 11, place, 4096);
        assert_eq!(tables.queue(&owner("cp", 3, 2, ALL), 11, place, 4096), c);
        assert_eq!(tables.queue(&owner("dd", 3, 1, ALL), 10, place, 4096), a);
        assert_eq!(tables.combos.len(), 3, "one per (process, cgroup, file)");
        tables.each(b, |stats| stats.commands += 2);
        let report = tables.report(TOP_OWNERS, |_| String::new());
        let by_comm = |comm: &str| {
            report
                .processes
                .iter()
                .find(|entry| entry.comm.as_deref() == Some(comm))
                .map(|entry| (entry.measures.user_ios, entry.measures.commands))
        };
        assert_eq!(by_comm("dd"), Some((3, 2)));
        assert_eq!(by_comm("cp"), Some((2, 0)));
        assert_eq!(report.cgroups.len(), 1);
        assert_eq!(report.cgroups[0].measures.user_ios, 5);
        assert_eq!(report.cgroups[0].measures.bytes, 5 * 4096);
        let by_inode = |ino: u64| {
            report
                .files
                .iter()
                .find(|entry| entry.inode == Some(ino))
                .map(|entry| (entry.measures.user_ios, entry.measures.commands))
        };
        assert_eq!(by_inode(1), Some((2, 0)));
        assert_eq!(by_inode(2), Some((3, 2)));
        // The counters serve polls are the same sums.
        let counts = tables.counts(|_| String::new());
        let total: u64 = counts
            .files
            .iter()
            .map(|entry| entry.measures.user_ios)
            .sum();
        assert_eq!(total, 5);
    }

    #[test]
    fn past_the_combinations_bound_io_goes_to_the_places_other() {
        let mut tables = AttributionTables::new(2);
        let place = (0, 1);
        // Capacity 2 per view, so 6 combinations: 2 processes x 2 files x
        // (2 cgroups and then `other`) passes it.
        let mut last = OwnerSlots::NONE;
        for cgroup in 1..=3u64 {
            for (tgid, ino) in [(1u32, 1u64), (1, 2), (2, 1), (2, 2)] {
                last = tables.queue(&owner("w", cgroup, ino, ALL), tgid, place, 512);
            }
        }
        assert!(
            tables.combos.len() <= 7,
            "{} combinations",
            tables.combos.len()
        );
        let entries = tables.combos[last.combo as usize].entries;
        let other = [
            tables.processes.slot(ProcessKey::OTHER, place),
            tables.cgroups.slot(CgroupKey::OTHER, place),
            tables.files.slot(FileKey::OTHER, place),
        ];
        assert_eq!(entries, other);
        let report = tables.report(TOP_OWNERS, |_| String::new());
        let bytes: u64 = report
            .cgroups
            .iter()
            .map(|entry| entry.measures.bytes)
            .sum();
        assert_eq!(bytes, 12 * 512, "nothing is lost past the bound");
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
