//! The diagnosis codes: a closed set, so a match on them is checked by the
//! compiler, serialized as the strings the JSON schema fixes.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

/// Stable diagnosis codes (part of the JSON schema).
///
/// Ordered by their strings, as they sorted when they were strings, so a
/// report's diagnoses come out in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    SubpageBlockSize,
    MisalignedStart,
    MisalignedIoOpt,
    MisalignedStack,
    CryptSectorSize,
    SplitAmplification,
    MergeBlocked,
    RequeuedCommands,
    IoErrors,
}

impl Code {
    pub const ALL: [Code; 9] = [
        Code::SubpageBlockSize,
        Code::MisalignedStart,
        Code::MisalignedIoOpt,
        Code::MisalignedStack,
        Code::CryptSectorSize,
        Code::SplitAmplification,
        Code::MergeBlocked,
        Code::RequeuedCommands,
        Code::IoErrors,
    ];

    /// The code as the JSON, the text report and the metrics name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::SubpageBlockSize => "subpage_block_size",
            Code::MisalignedStart => "misaligned_start",
            Code::MisalignedIoOpt => "misaligned_io_opt",
            Code::MisalignedStack => "misaligned_stack",
            Code::CryptSectorSize => "crypt_sector_size",
            Code::SplitAmplification => "split_amplification",
            Code::MergeBlocked => "merge_blocked",
            Code::RequeuedCommands => "requeued_commands",
            Code::IoErrors => "io_errors",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Ord for Code {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Code {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_to_the_schema_strings_and_sort_by_them() {
        let strings: Vec<String> = Code::ALL
            .iter()
            .map(|code| serde_json::to_string(code).unwrap())
            .collect();
        assert_eq!(
            strings,
            [
                "\"subpage_block_size\"",
                "\"misaligned_start\"",
                "\"misaligned_io_opt\"",
                "\"misaligned_stack\"",
                "\"crypt_sector_size\"",
                "\"split_amplification\"",
                "\"merge_blocked\"",
                "\"requeued_commands\"",
                "\"io_errors\"",
            ]
        );
        let mut sorted = Code::ALL;
        sorted.sort();
        let mut by_string = Code::ALL;
        by_string.sort_by_key(|code| code.as_str());
        assert_eq!(sorted, by_string);
        assert_eq!(Code::MergeBlocked.to_string(), "merge_blocked");
    }
}
