//! The diagnosis codes: a closed set, so a match on them is checked by the
//! compiler, serialized as the strings the JSON schema fixes.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One row per code: its variant and its string. The enum, [`Code::ALL`]
/// and [`Code::as_str`] come from these rows, so none can miss a code.
macro_rules! codes {
    ($($code:ident => $name:literal,)*) => {
        /// Stable diagnosis codes (part of the JSON schema).
        ///
        /// Ordered by their strings, as they sorted when they were strings, so a
        /// report's diagnoses come out in the same order.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code {
            $($code,)*
        }

        impl Code {
            /// Every code, in the rows' order.
            pub const ALL: [Code; [$($name,)*].len()] = [$(Code::$code,)*];

            /// The code as the JSON, the text report and the metrics name it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Code::$code => $name,)*
                }
            }
        }
    };
}

codes! {
    SubpageBlockSize => "subpage_block_size",
    MisalignedStart => "misaligned_start",
    MisalignedIoOpt => "misaligned_io_opt",
    MisalignedStack => "misaligned_stack",
    CryptSectorSize => "crypt_sector_size",
    AtomicWritesLost => "atomic_writes_lost",
    SplitAmplification => "split_amplification",
    MergeBlocked => "merge_blocked",
    RequeuedCommands => "requeued_commands",
    IoErrors => "io_errors",
}

impl Code {
    /// The code `name` spells (as [`Code::as_str`] does), if any.
    pub fn named(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|code| code.as_str() == name)
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

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Code::named(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is no diagnosis code")))
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
                "\"atomic_writes_lost\"",
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

    #[test]
    fn codes_read_back_from_their_strings_and_nothing_else() {
        for code in Code::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), code);
        }
        let error = serde_json::from_str::<Code>("\"split_amplifcation\"").unwrap_err();
        assert!(error
            .to_string()
            .contains("`split_amplifcation` is no diagnosis code"));
    }
}
