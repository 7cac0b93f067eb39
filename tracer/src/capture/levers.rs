//! What the environment chooses: the probe flavor (`IOSPLIT_PROBES`, else
//! btf where the kernel's BTF allows) and the hidden knobs that tests and the
//! bench turn (`IOSPLIT_RING_KB`, `IOSPLIT_LEVERS_OFF`).

use crate::error::{Error, Result};

use super::{btf, layout};

/// Names the probes to use: `btf` (`raw`, its old name, is accepted), `classic`, or unset for btf where BTF
/// allows; `noop` (the floor) attaches programs that return at once.
pub const PROBES_ENV: &str = "IOSPLIT_PROBES";
/// Probe levers to turn off, comma-separated (a hidden knob for the bench,
/// which measures each lever alone): `wake-check` (every record asks its
/// ring's fill, not one per [`WAKE_CHECK_BYTES`]) and `submitter-tgid`
/// (every record reads the current task, not only those emitted in the
/// submitter's context).
pub const LEVERS_OFF_ENV: &str = "IOSPLIT_LEVERS_OFF";
/// Bytes of records between two checks of a ring's fill, at most (an
/// eighth of the smallest ring's size below that).
const WAKE_CHECK_BYTES: u64 = 64 << 10;
/// Sets the block-event rings' total size in KiB (a hidden knob: small rings
/// force drops, to test that they are counted).
pub const RING_KB_ENV: &str = "IOSPLIT_RING_KB";
/// Largest `IOSPLIT_RING_KB`: 1 GiB.
const MAX_RING_KB: u32 = 1 << 20;

/// Which programs carry the block events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFlavor {
    /// BTF-typed tracepoints (`tp_btf`) reading `struct bio`/`struct request`
    /// with BTF offsets.
    Btf,
    /// Classic tracepoints reading the formatted record with format-file offsets.
    Classic,
    /// The floor: the BTF tracepoints with programs that return at once.
    /// Nothing is captured; only the tracepoints' dispatch is paid.
    Noop,
}

impl ProbeFlavor {
    pub fn name(self) -> &'static str {
        match self {
            ProbeFlavor::Btf => "BTF tracepoints",
            ProbeFlavor::Classic => "classic tracepoints",
            ProbeFlavor::Noop => "noop BTF tracepoints, capturing nothing",
        }
    }
}

/// The probe levers in use (see [`LEVERS_OFF_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Levers {
    wake_check: bool,
    submitter_tgid: bool,
}

impl Levers {
    pub(super) fn from_env() -> Result<Levers> {
        let mut levers = Levers {
            wake_check: true,
            submitter_tgid: true,
        };
        let value = std::env::var(LEVERS_OFF_ENV).unwrap_or_default();
        for name in value
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            match name {
                "wake-check" => levers.wake_check = false,
                "submitter-tgid" => levers.submitter_tgid = false,
                _ => {
                    return Err(Error::usage(format!(
                        "{LEVERS_OFF_ENV}={value}: `{name}` is not a lever; name wake-check or submitter-tgid, or unset it"
                    )))
                }
            }
        }
        Ok(levers)
    }

    /// The fill check's spacing for rings of at least `smallest` bytes.
    pub(super) fn wake_check_bytes(self, smallest: u32) -> u64 {
        match self.wake_check {
            true => WAKE_CHECK_BYTES.min(u64::from(smallest) / 8).max(8),
            false => 8,
        }
    }

    /// Whether every record reads the current task's tgid (the
    /// `submitter-tgid` lever off).
    pub(super) fn tgid_every_event(self) -> bool {
        !self.submitter_tgid
    }
}

/// `IOSPLIT_RING_KB` in bytes, if set; anything but 4..=1048576 KiB is refused.
pub(super) fn ring_bytes_from_env() -> Result<Option<u32>> {
    let Ok(value) = std::env::var(RING_KB_ENV) else {
        return Ok(None);
    };
    parse_ring_kb(&value).map(Some).ok_or_else(|| {
        Error::usage(format!(
            "{RING_KB_ENV}={value} is not a ring size; give KiB from 4 to {MAX_RING_KB}, or unset it"
        ))
    })
}

fn parse_ring_kb(value: &str) -> Option<u32> {
    let kb: u32 = value.trim().parse().ok()?;
    (4..=MAX_RING_KB).contains(&kb).then_some(kb << 10)
}

/// BTF-typed tracepoints unless told otherwise or the kernel's BTF lacks something.
pub(super) fn choose_flavor(
    accept_noop: bool,
    read_owners: bool,
) -> Result<(ProbeFlavor, Option<layout::ObjectLayout>)> {
    let requested = std::env::var(PROBES_ENV).unwrap_or_default();
    match requested.as_str() {
        "classic" => return Ok((ProbeFlavor::Classic, None)),
        "noop" if accept_noop => return Ok((ProbeFlavor::Noop, None)),
        "noop" => {
            return Err(Error::usage(format!(
                "{PROBES_ENV}=noop captures nothing (it measures the tracepoints' floor); only `report` accepts it"
            )))
        }
        // `raw` is the flavor's name before 0.2: scripts that set it keep working.
        "" | "btf" | "raw" => {}
        other => {
            return Err(Error::usage(format!(
                "{PROBES_ENV}={other} is not a probe flavor; use btf or classic (or noop with report), or unset it"
            )))
        }
    }
    let resolved = btf::Btf::from_sys_fs()
        .map_err(layout::LayoutError::from)
        .and_then(|btf| layout::resolve(&btf))
        .map_err(|err| crate::error::one_line(&err));
    match resolved {
        Ok(mut layout) => {
            // Unreadable kallsyms only leaves direct I/O's file unknown.
            let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
            layout::enable_direct_io(&mut layout.kernel.owner, &kallsyms);
            if !read_owners {
                let owner = &mut layout.kernel.owner;
                owner.process_enabled = 0;
                owner.cgroup_enabled = 0;
                owner.file_enabled = 0;
                owner.direct_enabled = 0;
            }
            layout::set_spans(&mut layout.kernel);
            Ok((ProbeFlavor::Btf, Some(layout)))
        }
        Err(why) if !requested.is_empty() => Err(Error::failure(format!(
            "BTF tracepoints need the kernel's BTF: {why}; unset {PROBES_ENV} to use classic tracepoints"
        ))),
        Err(why) => {
            crate::status::status(format_args!("note: using classic tracepoints ({why})"));
            Ok((ProbeFlavor::Classic, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_ring_kb;

    #[test]
    fn ring_kb_accepts_kib_from_a_page_to_a_gib() {
        assert_eq!(parse_ring_kb("8"), Some(8 << 10));
        assert_eq!(parse_ring_kb(" 1048576 "), Some(1 << 30));
        for bad in ["", "0", "3", "1048577", "-8", "8k", "99999999999"] {
            assert_eq!(parse_ring_kb(bad), None, "{bad:?}");
        }
    }
}
