//! Traces other tools took, as recording items: blkparse's default text
//! output and the kernel's ftrace `blk` tracer. Both print the blktrace
//! actions (A Q X M F G I D C R …) one per line; the block events the engine
//! reads become [`BlockEvent`]s, the rest (G I P U …) are skipped.
//!
//! What the text lacks, [`Import::notes`] says: no dirty-buffer events, and
//! request merges that read like bio back merges.

use std::fmt;

use tracer_common::{BlockEvent, EventKind, RWBS_BYTES};

use crate::geometry::{DevId, DiskGeometry};

/// Which text the input is (`--from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextFormat {
    /// `blkparse -i TRACE` default output.
    Blkparse,
    /// `/sys/kernel/tracing/trace` with the `blk` tracer.
    FtraceBlk,
}

impl TextFormat {
    pub fn name(self) -> &'static str {
        match self {
            TextFormat::Blkparse => "blkparse",
            TextFormat::FtraceBlk => "ftrace-blk",
        }
    }
}

/// The imported events and what could not be carried over.
#[derive(Clone, Debug, Default)]
pub struct Import {
    pub events: Vec<BlockEvent>,
    /// Lines that looked like events but did not parse.
    pub unparsed: u64,
    /// Event lines of actions the engine has no use for (G, I, P, U …).
    pub skipped: u64,
    pub notes: Vec<String>,
}

/// Why a text import failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("no {format} event lines found (is this {format} output?)")]
    NoEvents { format: &'static str },
}

impl fmt::Display for TextFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses the whole text. `C` completes a request on a request-based disk
/// of `geometry`, and a bio anywhere else (bio-based disks, and partitions,
/// where unremapped empty flushes complete); all `C` are requests when the
/// geometry is unknown.
pub fn import(
    text: &str,
    format: TextFormat,
    geometry: &[DiskGeometry],
) -> Result<Import, ImportError> {
    let request_based: Option<Vec<u32>> = (!geometry.is_empty()).then(|| {
        geometry
            .iter()
            .filter(|disk| disk.request_based)
            .filter_map(|disk| disk.dev.map(DevId::to_kernel))
            .collect()
    });
    let mut import = Import::default();
    let mut merges = 0u64;
    for line in text.lines() {
        let parsed = match format {
            TextFormat::Blkparse => blkparse_fields(line),
            TextFormat::FtraceBlk => ftrace_fields(line),
        };
        let Some(fields) = parsed else {
            continue;
        };
        match event_of(&fields, request_based.as_deref()) {
            Parsed::Event(event) => {
                if event.kind == EventKind::Backmerge as u8 {
                    merges += 1;
                }
                import.events.push(event)
            }
            Parsed::Skipped => import.skipped += 1,
            Parsed::Bad => import.unparsed += 1,
        }
    }
    if import.events.is_empty() {
        return Err(ImportError::NoEvents {
            format: format.name(),
        });
    }
    import.notes.push(format!(
        "{format} has no dirty-buffer events: buffered sub-page writes are not measured"
    ));
    if merges > 0 {
        import.notes.push(format!(
            "{format} prints request merges like bio back merges (M): {merges} merges counted as back merges"
        ));
    }
    if format == TextFormat::FtraceBlk {
        import
            .notes
            .push("ftrace timestamps have microsecond resolution: latencies are rounded".into());
    }
    if import.unparsed > 0 {
        import.notes.push(format!(
            "{} event lines could not be parsed and were left out",
            import.unparsed
        ));
    }
    Ok(import)
}

/// The fields every action line has, borrowed from the line.
#[derive(Debug, PartialEq, Eq)]
struct Fields<'a> {
    dev: &'a str,
    ts_ns: u64,
    pid: u32,
    action: &'a str,
    rwbs: &'a str,
    /// What follows rwbs: "2048 + 8 [dd]", "2048 / 2056 [dd]", "2048 + 8 <- (7,1) 0".
    rest: &'a str,
}

/// `  8,0    3        1     0.000000000  1234  Q  WS 2048 + 8 [dd]`
fn blkparse_fields(line: &str) -> Option<Fields<'_>> {
    let mut words = Words(line);
    let dev = words.next()?;
    if !dev.contains(',') {
        return None;
    }
    let _cpu: u32 = words.next()?.parse().ok()?;
    let _sequence: u64 = words.next()?.parse().ok()?;
    let ts_ns = seconds_to_ns(words.next()?)?;
    let pid = words.next()?.parse().ok()?;
    let action = words.next()?;
    let rwbs = words.next()?;
    Some(Fields {
        dev,
        ts_ns,
        pid,
        action,
        rwbs,
        rest: words.0.trim(),
    })
}

/// `      dd-1234    [001] d..1.   123.456789: 7,0    Q  WS 2048 + 8 [dd]`
fn ftrace_fields(line: &str) -> Option<Fields<'_>> {
    if line.starts_with('#') {
        return None;
    }
    let (head, event) = line.split_once(": ")?;
    let (task, after_task) = head.rsplit_once('[')?;
    let (_, pid) = task.trim().rsplit_once('-')?;
    let ts_ns = seconds_to_ns(after_task.split_whitespace().last()?)?;
    let mut words = Words(event);
    let dev = words.next()?;
    if !dev.contains(',') {
        return None;
    }
    let action = words.next()?;
    let rwbs = words.next()?;
    Some(Fields {
        dev,
        ts_ns,
        pid: pid.parse().ok()?,
        action,
        rwbs,
        rest: words.0.trim(),
    })
}

/// Whitespace-separated words, keeping the unread rest.
struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let text = self.0.trim_start();
        if text.is_empty() {
            return None;
        }
        let end = text.find(char::is_whitespace).unwrap_or(text.len());
        self.0 = &text[end..];
        Some(&text[..end])
    }
}

/// "12.345678" or "0.000000001" seconds, exactly, as nanoseconds.
fn seconds_to_ns(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = whole.parse().ok()?;
    let mut nanos: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    for _ in fraction.len()..9 {
        nanos *= 10;
    }
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// "7,16" as a kernel dev_t.
fn dev_of(text: &str) -> Option<u32> {
    let (major, minor) = text
        .trim_matches(|c| c == '(' || c == ')')
        .split_once(',')?;
    let (major, minor): (u32, u32) = (major.trim().parse().ok()?, minor.trim().parse().ok()?);
    (major < (1 << 12) && minor < (1 << 20)).then(|| DevId::new(major, minor).to_kernel())
}

enum Parsed {
    Event(BlockEvent),
    Skipped,
    Bad,
}

fn event_of(fields: &Fields<'_>, request_based: Option<&[u32]>) -> Parsed {
    let Some(dev) = dev_of(fields.dev) else {
        return Parsed::Bad;
    };
    let kind = match fields.action {
        "Q" => EventKind::Queue,
        "X" => EventKind::Split,
        "M" => EventKind::Backmerge,
        "F" => EventKind::Frontmerge,
        "A" => EventKind::Remap,
        "D" => EventKind::Issue,
        "R" => EventKind::Requeue,
        "C" if request_based.is_some_and(|disks| !disks.contains(&dev)) => EventKind::BioComplete,
        "C" => EventKind::Complete,
        action if action.len() <= 2 && action.bytes().all(|b| b.is_ascii_alphabetic()) => {
            return Parsed::Skipped
        }
        _ => return Parsed::Bad,
    };
    let mut event = BlockEvent::ZERO;
    event.kind = kind as u8;
    event.dev = dev;
    event.ts_ns = fields.ts_ns;
    event.tgid = fields.pid;
    let letters = fields.rwbs.as_bytes();
    if letters.len() > RWBS_BYTES || !letters.iter().all(u8::is_ascii_uppercase) {
        return Parsed::Bad;
    }
    event.rwbs[..letters.len()].copy_from_slice(letters);
    match range_of(kind, fields.rest, &mut event) {
        Some(()) => Parsed::Event(event),
        None => Parsed::Bad,
    }
}

/// Fills the sectors from what follows rwbs; zero-length I/O has none.
fn range_of(kind: EventKind, rest: &str, event: &mut BlockEvent) -> Option<()> {
    let mut words = Words(rest);
    let Some(first) = words.next() else {
        return Some(());
    };
    if first.starts_with('[') || first.starts_with('(') {
        // "FWS [dd]", "N () [kworker]": no range.
        return Some(());
    }
    event.sector = first.parse().ok()?;
    match (words.next()?, kind) {
        ("/", EventKind::Split) => event.aux_sector = words.next()?.parse().ok()?,
        // "C FN 0 [0]": an empty bio's completion prints its sector only.
        (status, EventKind::Complete | EventKind::BioComplete) if status.starts_with('[') => {
            event.error = status_code(status);
        }
        ("+", _) => {
            event.nr_sector = words.next()?.parse().ok()?;
            if kind == EventKind::Remap {
                // "<- (7,1) 2048": where the I/O came from.
                if words.next()? != "<-" {
                    return None;
                }
                event.aux_dev = dev_of(words.next()?)?;
                event.aux_sector = words.next()?.parse().ok()?;
            } else if matches!(kind, EventKind::Complete | EventKind::BioComplete) {
                if let Some(status) = words.next() {
                    event.error = status_code(status);
                }
            }
        }
        _ => return None,
    }
    Some(())
}

/// "[0]" or "[-5]": a completion's status (0 when unreadable).
fn status_code(word: &str) -> i32 {
    word.strip_prefix('[')
        .and_then(|code| code.strip_suffix(']'))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(request_based: bool) -> DiskGeometry {
        DiskGeometry {
            name: "loop0".into(),
            dev: Some(DevId::new(7, 0)),
            request_based,
            ..Default::default()
        }
    }

    #[test]
    fn ftrace_lines_become_block_events() {
        let text = "# tracer: blk\n\
            #\n\
            \x20           dd-4242    [001] d..1.   123.456789: 7,0    A  WS 2048 + 8 <- (7,1) 0\n\
            \x20           dd-4242    [001] d..1.   123.456790: 7,0    Q  WS 2048 + 8 [dd]\n\
            \x20           dd-4242    [001] d..1.   123.456791: 7,0    X  WS 2048 / 2052 [dd]\n\
            \x20           dd-4242    [001] d..1.   123.456792: 7,0    G  WS 2048 + 4 [dd]\n\
            \x20 kworker/1:1H-77     [001] d..1.   123.456800: 7,0    D  WS 2048 + 8 [kworker/1:1H]\n\
            \x20       <idle>-0       [000] d.h1.   123.457000: 7,0    C  WS 2048 + 8 [0]\n\
            \x20           dd-4242    [001] d..1.   123.458000: 7,0    Q FWS [dd]\n\
            \x20  ksoftirqd/1-22      [001] d.s1.   123.459000:   7,1    C  FN 0 [0]\n\
            \x20           dd-4242    [001] ..... 123.5: tracing_mark_write: hello\n";
        let import = import(text, TextFormat::FtraceBlk, &[disk(true)]).unwrap();
        let kinds: Vec<u8> = import.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Remap,
                EventKind::Queue,
                EventKind::Split,
                EventKind::Issue,
                EventKind::Complete,
                EventKind::Queue,
                EventKind::BioComplete
            ]
            .map(|k| k as u8)
        );
        assert_eq!(import.skipped, 1);
        assert_eq!(import.unparsed, 0);
        let remap = import.events[0];
        assert_eq!(
            (
                remap.dev,
                remap.aux_dev,
                remap.sector,
                remap.nr_sector,
                remap.aux_sector
            ),
            (7 << 20, (7 << 20) | 1, 2048, 8, 0)
        );
        assert_eq!(remap.ts_ns, 123_456_789_000);
        assert_eq!(remap.tgid, 4242);
        assert_eq!(&remap.rwbs[..3], b"WS\0");
        assert_eq!(
            (import.events[2].sector, import.events[2].aux_sector),
            (2048, 2052)
        );
        assert_eq!(import.events[3].tgid, 77);
        assert_eq!(import.events[5].nr_sector, 0);
    }

    #[test]
    fn blkparse_lines_become_block_events_and_bio_disks_complete_bios() {
        let text = "  7,0    1        1     0.000000000  4242  Q  WS 2048 + 8 [dd]\n\
            \x20 7,0    1        2     0.000001500  4242  M  WS 2056 + 8 [dd]\n\
            \x20 7,0    0        3     0.000900000     0  C  WS 2048 + 16 [-5]\n\
            CPU1 (7,0):\n Reads Queued:           0,        0KiB\n";
        let import = import(text, TextFormat::Blkparse, &[disk(false)]).unwrap();
        assert_eq!(import.events.len(), 3);
        assert_eq!(import.events[1].ts_ns, 1_500);
        assert_eq!(import.events[2].kind, EventKind::BioComplete as u8);
        assert_eq!(import.events[2].error, -5);
        assert!(import.notes.iter().any(|n| n.contains("back merges")));
    }

    #[test]
    fn text_without_events_is_refused() {
        assert_eq!(
            import("hello\nworld\n", TextFormat::Blkparse, &[]).unwrap_err(),
            ImportError::NoEvents { format: "blkparse" }
        );
        assert!(import("", TextFormat::FtraceBlk, &[]).is_err());
    }

    #[test]
    fn odd_numbers_are_refused_not_wrapped() {
        assert_eq!(seconds_to_ns("1.5"), Some(1_500_000_000));
        assert_eq!(seconds_to_ns("99999999999999999999.0"), None);
        assert_eq!(seconds_to_ns("1.0000000001"), None);
        assert_eq!(seconds_to_ns("1.-5"), None);
        assert_eq!(dev_of("(7,1)"), Some((7 << 20) | 1));
        assert_eq!(dev_of("99999,1"), None);
    }
}
