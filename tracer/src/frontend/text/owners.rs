//! `report --by VIEW`: the top owners of each view asked for (process,
//! cgroup, file), each with its measures on its device.

use crate::frontend::{units, words};
use crate::model::{Attribution, Dominant, OwnerEntry, OwnerKnown, OwnerView};

use super::layout::Out;

/// `report --by VIEW`: the top owners of one view, each on its device.
pub(super) fn owner_section(out: &mut Out, attribution: &Attribution, view: OwnerView) {
    let (title, entries, folded) = match view {
        OwnerView::Process => (
            "process",
            &attribution.processes,
            attribution.folded.processes,
        ),
        OwnerView::Cgroup => ("cgroup", &attribution.cgroups, attribution.folded.cgroups),
        OwnerView::File => ("file", &attribution.files, attribution.folded.files),
    };
    let folded = match folded {
        0 => String::new(),
        n => format!("; {} more summed into other", units::thousands(n)),
    };
    out.line(&format!("by {title} (top by commands{folded}):"));
    if entries.is_empty() {
        out.line("  no I/O seen");
        return;
    }
    for entry in entries {
        let m = &entry.measures;
        out.line(&format!("  {} on {}:", owner_name(entry), entry.device));
        out.line(&format!(
            "    {} user I/Os (avg {}) -> {} commands ({} per user I/O), {}",
            units::thousands(m.user_ios),
            units::bytes(words::bytes_per_user_io(m.bytes, m.user_ios)),
            units::thousands(m.commands),
            units::ratio(m.amplification),
            units::bytes(m.bytes as f64),
        ));
        out.line(&format!(
            "    splits {}, merges {} of user I/Os",
            units::percent(m.split_share),
            units::percent(m.merge_share),
        ));
        let p99 = |dist: &crate::model::Distribution| {
            if dist.count == 0 {
                "-".to_string()
            } else {
                units::micros(dist.p99)
            }
        };
        out.line(&format!(
            "    p99 queue->issue {}, issue->complete {}, queue->complete {}",
            p99(&m.queue_to_issue_us),
            p99(&m.issue_to_complete_us),
            p99(&m.queue_to_complete_us),
        ));
        match m.dominant {
            Some(Dominant::Queue) => {
                out.line("    queue time dominates (mean queue->issue above issue->complete)")
            }
            Some(Dominant::Device) => {
                out.line("    device time dominates (mean issue->complete above queue->issue)")
            }
            None => {}
        }
    }
}

/// How an owner reads in the text report; says plainly what is unknown.
fn owner_name(entry: &OwnerEntry) -> String {
    match entry.owner {
        OwnerKnown::Other => "other".to_string(),
        OwnerKnown::KernelThread => {
            "a kernel thread (writeback: the kernel does not say for which process)".to_string()
        }
        OwnerKnown::NoFile => {
            "no file (pages of no file: user-buffer direct I/O or swap)".to_string()
        }
        OwnerKnown::Unknown => "unknown (not told by the kernel or this probe flavor)".to_string(),
        OwnerKnown::Known => {
            if let Some(pid) = entry.pid {
                return match &entry.comm {
                    Some(comm) => format!("{comm} (pid {pid})"),
                    None => format!("pid {pid}"),
                };
            }
            if let Some(id) = entry.cgroup_id {
                let workload = &entry.workload;
                // A container's id is told apart by its first 12 digits, as runtimes print it.
                let container = workload
                    .container_id
                    .as_deref()
                    .map(|id| format!("container {}", &id[..id.len().min(12)]));
                return match (&workload.pod_uid, container, &entry.cgroup) {
                    (Some(pod), container, _) => {
                        let qos = workload.qos.as_deref().unwrap_or("?");
                        match container {
                            Some(container) => format!("pod {pod} ({qos}), {container}"),
                            None => format!("pod {pod} ({qos})"),
                        }
                    }
                    (None, Some(container), _) => container,
                    (None, None, Some(path)) => path.clone(),
                    (None, None, None) => format!("cgroup id {id}"),
                };
            }
            let direct = if entry.direct { " (direct I/O)" } else { "" };
            match entry.file_name() {
                Some(name) => format!("{name}{direct}"),
                None => "unknown file".to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::test_reports::{distribution, seed_report};
    use crate::frontend::text::render_report;
    use crate::frontend::text::tests::assert_fits;

    #[test]
    fn an_owner_says_its_bytes_per_user_io_as_json_has_them() {
        use crate::model::{OwnerKnown, OwnerMeasures};
        let mut dd = OwnerEntry::new(
            OwnerKnown::Known,
            "vda".into(),
            OwnerMeasures {
                user_ios: 1600,
                commands: 800,
                bytes: 1600 * 65230,
                amplification: 0.5,
                ..OwnerMeasures::default()
            },
        );
        dd.pid = Some(101);
        dd.comm = Some("dd".into());
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd],
            text_views: vec![OwnerView::Process],
            ..Attribution::default()
        });
        let text = render_report(&report, 80);
        assert!(
            text.contains("1,600 user I/Os (avg 63.7 KiB) -> 800 commands"),
            "{text}"
        );
        assert!(!text.contains("127"), "{text}");
    }

    /// `--by process,file`: the sections appear in the order asked, the
    /// kworker and the unknown file say so, and nothing is wider than the page.
    #[test]
    fn owner_sections_name_what_is_known_and_say_what_is_not() {
        use crate::model::{FoldedOwners, OwnerMeasures};
        let measures = OwnerMeasures {
            user_ios: 32,
            commands: 64,
            bytes: 2 << 20,
            amplification: 2.0,
            queue_to_issue_us: distribution(&[(10, 32)]),
            issue_to_complete_us: distribution(&[(900, 64)]),
            dominant: Some(Dominant::Device),
            ..OwnerMeasures::default()
        };
        let mut dd = OwnerEntry::new(OwnerKnown::Known, "loop0p1".into(), measures.clone());
        dd.pid = Some(4242);
        dd.comm = Some("dd".into());
        let kworker = OwnerEntry::new(OwnerKnown::KernelThread, "loop0p1".into(), measures.clone());
        let mut file = OwnerEntry::new(OwnerKnown::Known, "loop0p1".into(), measures.clone());
        file.inode = Some(12);
        file.dev = Some("259:0".into());
        file.direct = true;
        let mut report = seed_report();
        report.attribution = Some(Attribution {
            processes: vec![dd, kworker],
            cgroups: Vec::new(),
            files: vec![file],
            folded: FoldedOwners {
                processes: 3,
                ..FoldedOwners::default()
            },
            text_views: vec![OwnerView::File, OwnerView::Process],
        });
        let text = render_report(&report, 80);
        assert_fits(&text, 80);
        let file_at = text.find("by file (top by commands):").unwrap();
        let process_at = text
            .find("by process (top by commands; 3 more summed into other):")
            .unwrap();
        assert!(file_at < process_at, "{text}");
        assert!(text.contains("dd (pid 4242) on loop0p1:"), "{text}");
        assert!(text.contains("kernel thread (writeback"), "{text}");
        assert!(
            text.contains("inode 12 on 259:0 (direct I/O) on loop0p1:"),
            "{text}"
        );
        assert!(text.contains("device time dominates"), "{text}");
        assert!(!text.contains("by cgroup"), "{text}");
    }
}
