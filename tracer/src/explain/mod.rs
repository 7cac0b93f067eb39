//! The words of a diagnosis: its explanation and its fix, from the typed
//! [`Finding`] the engine made (its numbers, its severity and the fix it
//! decided on). Reports carry these strings in [`Diagnosis`], so the text
//! report, the TUI, the HTML page and the JSON all say the same.
//!
//! One file per code, each a `words` function of that code's evidence and
//! its [`WhoPays`]; `partition` holds the repartitioning commands the static
//! codes share. A new code adds its file and one arm in [`words`] and in
//! [`who_pays`] (the compiler asks for both). Pure: nothing here decides a
//! number, it only says the ones the finding holds.

mod atomic_writes_lost;
mod crypt_sector_size;
mod io_errors;
mod merge_blocked;
mod misaligned_io_opt;
mod misaligned_stack;
mod misaligned_start;
mod partition;
mod requeued_commands;
mod split_amplification;
mod subpage_block_size;
#[cfg(test)]
mod tests;

pub use io_errors::statuses;

use crate::model::{Code, Diagnosis, Evidence, Finding};

/// What a report says about a finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Words {
    /// What was seen, and why it costs.
    pub explanation: String,
    /// What to do: commands and settings, one per line where there are several.
    pub fix: String,
}

/// The explanation and the fix of `finding`.
pub fn words(finding: &Finding) -> Words {
    match &finding.evidence {
        Evidence::SubpageBlockSize(evidence) => subpage_block_size::words(finding, evidence),
        Evidence::MisalignedStart(evidence) => misaligned_start::words(finding, evidence),
        Evidence::MisalignedIoOpt(evidence) => misaligned_io_opt::words(finding, evidence),
        Evidence::MisalignedStack(evidence) => misaligned_stack::words(finding, evidence),
        Evidence::CryptSectorSize(evidence) => crypt_sector_size::words(finding, evidence),
        Evidence::AtomicWritesLost(evidence) => atomic_writes_lost::words(finding, evidence),
        Evidence::SplitAmplification(evidence) => split_amplification::words(finding, evidence),
        Evidence::MergeBlocked(evidence) => merge_blocked::words(finding, evidence),
        Evidence::RequeuedCommands(evidence) => requeued_commands::words(finding, evidence),
        Evidence::IoErrors(evidence) => io_errors::words(finding, evidence),
    }
}

/// Who pays for a code's finding, as `run` says when the command it traced
/// paid little for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhoPays {
    /// The workloads it costs most, as a clause ("buffered I/O through …").
    Workloads(&'static str),
    /// No workload pays it in device commands a fix would remove (dm-crypt's
    /// small sectors cost CPU; failed commands need a repair): such a code
    /// carries no what-if, so no run is weighed against one.
    NoCommandCost,
}

/// Who pays for `code`'s findings.
pub fn who_pays(code: Code) -> WhoPays {
    match code {
        Code::SubpageBlockSize => subpage_block_size::WHO_PAYS,
        Code::MisalignedStart => misaligned_start::WHO_PAYS,
        Code::MisalignedIoOpt => misaligned_io_opt::WHO_PAYS,
        Code::MisalignedStack => misaligned_stack::WHO_PAYS,
        Code::CryptSectorSize => crypt_sector_size::WHO_PAYS,
        Code::AtomicWritesLost => atomic_writes_lost::WHO_PAYS,
        Code::SplitAmplification => split_amplification::WHO_PAYS,
        Code::MergeBlocked => merge_blocked::WHO_PAYS,
        Code::RequeuedCommands => requeued_commands::WHO_PAYS,
        Code::IoErrors => io_errors::WHO_PAYS,
    }
}

/// `finding` as a report carries it: with its words.
pub fn diagnosis(finding: Finding) -> Diagnosis {
    let Words { explanation, fix } = words(&finding);
    Diagnosis::worded(finding, explanation, fix)
}

/// [`diagnosis`] of each finding, in their order.
pub fn diagnoses(findings: impl IntoIterator<Item = Finding>) -> Vec<Diagnosis> {
    findings.into_iter().map(diagnosis).collect()
}

/// The "major:minor" a device is called by when the trace knew it only by
/// its number (an imported trace without `--geometry`): no kernel name has
/// a colon, so no path under /dev or /sys/block is built from it.
pub(crate) fn numbered(name: &str) -> Option<&str> {
    let (major, minor) = name.split_once(':')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    (digits(major) && digits(minor)).then_some(name)
}

/// A file of `disk`'s sysfs directory (`queue/nr_requests`,
/// `device/features`): under /sys/block by name, or under /sys/dev/block
/// by number, which names the same directory for any major:minor.
pub(crate) fn sys_file(disk: &str, file: &str) -> String {
    match numbered(disk) {
        Some(number) => format!("/sys/dev/block/{number}/{file}"),
        None => format!("/sys/block/{disk}/{file}"),
    }
}

/// The kernel name of `name` as a fix may print it: itself, or for a
/// numbered device a placeholder that [`numbered_note`] says how to fill.
pub(crate) fn kernel_name(name: &str) -> String {
    match numbered(name) {
        Some(number) => format!("<name of {number}>"),
        None => name.to_string(),
    }
}

/// `name`'s device node: `/dev/NAME`, never `/dev/MAJ:MIN`.
pub(crate) fn dev_node(name: &str) -> String {
    format!("/dev/{}", kernel_name(name))
}

/// For a fix about a numbered device: where its name and its queue are, on
/// the machine the trace was taken on (the numbers are that machine's).
pub(crate) fn numbered_note(name: &str) -> Option<String> {
    numbered(name).map(|number| {
        format!(
            "{number} is the device's major:minor on the machine the trace was taken on; there, its kernel name (<name of {number}>) is DEVNAME in /sys/dev/block/{number}/uevent, and if it is a partition, its disk's queue is /sys/dev/block/{number}/../queue"
        )
    })
}

/// `fix` with the numbered-device note of `names` (the first that has one)
/// on a line of its own.
pub(crate) fn with_numbered_note<'a>(
    fix: String,
    names: impl IntoIterator<Item = &'a str>,
) -> String {
    match names.into_iter().find_map(numbered_note) {
        Some(note) => format!("{fix}\n{note}"),
        None => fix,
    }
}

/// A geometry value as the words say it: 0 is one the trace or the
/// geometry did not give (no queue has a zero-sized cap, depth or block).
pub(crate) fn known<T: Copy + Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

/// "1 MiB", "192 KiB", "3584 B": exact, in the largest unit that divides.
pub fn exact_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map(|(unit, name)| format!("{} {name}", bytes / unit))
        .unwrap_or_else(|| format!("{bytes} B"))
}
