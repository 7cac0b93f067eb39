//! `serve --by process|cgroup|file`: who caused the I/O, as counter series
//! of bounded cardinality.
//!
//! Each view serves at most [`SERVED_OWNERS`] (owner, device) series. An
//! owner joins when it is among the top [`TOP_OWNERS`] by commands at a
//! scrape, and its series counts from then on; what it did before joining,
//! and all I/O of owners not served, is counted in the device's `other`
//! series. So no series ever goes down, and a view's series on a device sum
//! to the I/O attributed there since `serve` started. When a view is full, a
//! joining owner replaces the served one with the fewest commands; that
//! owner's I/O goes to `other` from then on.

use std::collections::BTreeMap;

use crate::engine::attribution::TOP_OWNERS;
use crate::model::{Attribution, OwnerEntry, OwnerKnown, OwnerMeasures, OwnerView, Workload};

use super::tables::Total;
use crate::frontend::prometheus::Labels;

/// Series each view serves per scrape at most (besides `other`).
pub const SERVED_OWNERS: usize = 2 * TOP_OWNERS;

/// The counters served per owner: name, help, and the value in the measures.
type OwnerCounter = (&'static str, &'static str, fn(&OwnerMeasures) -> u64);
pub const OWNER_COUNTERS: [OwnerCounter; 3] = [
    (
        "iosplit_owner_user_ios",
        "User I/Os by who caused them (serve --by), top owners plus `other`.",
        |m| m.user_ios,
    ),
    (
        "iosplit_owner_commands",
        "Device commands by who caused them (serve --by), top owners plus `other`.",
        |m| m.commands,
    ),
    (
        "iosplit_owner_bytes",
        "Bytes by who caused them (serve --by), top owners plus `other`.",
        |m| m.bytes,
    ),
];

/// An owner's identity, stable across scrapes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OwnerId {
    Process { pid: u32, comm: String },
    KernelThread,
    Cgroup(u64),
    File { dev: String, inode: u64 },
    NoFile,
    Unknown,
}

impl OwnerId {
    /// None for the engine's own `other` entries.
    fn of(entry: &OwnerEntry) -> Option<OwnerId> {
        Some(match entry.owner {
            OwnerKnown::Other => return None,
            OwnerKnown::KernelThread => OwnerId::KernelThread,
            OwnerKnown::NoFile => OwnerId::NoFile,
            OwnerKnown::Unknown => OwnerId::Unknown,
            OwnerKnown::Known => match (entry.pid, entry.cgroup_id, entry.inode) {
                (Some(pid), _, _) => OwnerId::Process {
                    pid,
                    comm: entry.comm.clone().unwrap_or_default(),
                },
                (_, Some(id), _) => OwnerId::Cgroup(id),
                (_, _, Some(inode)) => OwnerId::File {
                    dev: entry.dev.clone().unwrap_or_default(),
                    inode,
                },
                _ => OwnerId::Unknown,
            },
        })
    }
}

/// The `owner` label: a name where one was resolved, else the ids.
fn owner_label(entry: &OwnerEntry) -> String {
    match entry.owner {
        OwnerKnown::KernelThread => return "kernel thread".into(),
        OwnerKnown::NoFile => return "no file".into(),
        OwnerKnown::Unknown => return "unknown".into(),
        OwnerKnown::Other => return "other".into(),
        OwnerKnown::Known => {}
    }
    if let Some(pid) = entry.pid {
        return format!("{}[{pid}]", entry.comm.as_deref().unwrap_or("?"));
    }
    if let Some(id) = entry.cgroup_id {
        return entry
            .cgroup
            .clone()
            .unwrap_or_else(|| format!("cgroup id {id}"));
    }
    entry.file_name().unwrap_or_else(|| "unknown".into())
}

fn view_name(view: OwnerView) -> &'static str {
    match view {
        OwnerView::Process => "process",
        OwnerView::Cgroup => "cgroup",
        OwnerView::File => "file",
    }
}

fn view_entries(attribution: &Attribution, view: OwnerView) -> &[OwnerEntry] {
    match view {
        OwnerView::Process => &attribution.processes,
        OwnerView::Cgroup => &attribution.cgroups,
        OwnerView::File => &attribution.files,
    }
}

fn view_entries_mut(attribution: &mut Attribution, view: OwnerView) -> &mut Vec<OwnerEntry> {
    match view {
        OwnerView::Process => &mut attribution.processes,
        OwnerView::Cgroup => &mut attribution.cgroups,
        OwnerView::File => &mut attribution.files,
    }
}

/// One served owner on one device.
#[derive(Debug)]
struct Member {
    label: String,
    /// cgroups: the pod, container and unit labels (`pod_uid` joins with
    /// kube-state-metrics' `kube_pod_info{uid=…}`).
    workload: Workload,
    totals: [Total; 3],
}

/// All I/O attributed on one device in one view, and the part no served
/// owner counts.
#[derive(Debug, Default)]
struct Attributed {
    all: [Total; 3],
    other: [u64; 3],
}

/// The `--by` views' series, cumulative since `serve` started.
#[derive(Debug, Default)]
pub struct OwnerSeries {
    views: Vec<OwnerView>,
    members: BTreeMap<(OwnerView, String, OwnerId), Member>,
    attributed: BTreeMap<(OwnerView, String), Attributed>,
}

impl OwnerSeries {
    pub fn new(views: Vec<OwnerView>) -> OwnerSeries {
        OwnerSeries {
            views,
            ..OwnerSeries::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// Takes in one scrape's counters (every entry, `engine.attribution_counts()`);
    /// `name` resolves the names of owners that join (cgroup and file paths).
    pub fn absorb(&mut self, attribution: &Attribution, name: impl Fn(&mut Attribution)) {
        for view in self.views.clone() {
            let entries = view_entries(attribution, view);
            // What grew on each device, all owners together.
            let mut all: BTreeMap<&str, [u64; 3]> = BTreeMap::new();
            for entry in entries {
                let sums = all.entry(entry.device.as_str()).or_default();
                for (sum, (_, _, value)) in sums.iter_mut().zip(OWNER_COUNTERS) {
                    *sum += value(&entry.measures);
                }
            }
            let mut grown_unserved: BTreeMap<String, [u64; 3]> = BTreeMap::new();
            for (device, sums) in &all {
                let attributed = self
                    .attributed
                    .entry((view, device.to_string()))
                    .or_default();
                grown_unserved.insert(device.to_string(), observe(&mut attributed.all, *sums));
            }
            // Served owners take their growth out of `other`'s.
            for ((member_view, device, id), member) in &mut self.members {
                if *member_view != view {
                    continue;
                }
                let now = entries
                    .iter()
                    .find(|e| &e.device == device && OwnerId::of(e).as_ref() == Some(id))
                    .map_or([0; 3], |entry| counts(&entry.measures));
                let grown = observe(&mut member.totals, now);
                if let Some(rest) = grown_unserved.get_mut(device) {
                    for (rest, grown) in rest.iter_mut().zip(grown) {
                        *rest = rest.saturating_sub(grown);
                    }
                }
            }
            for (device, grown) in grown_unserved {
                if let Some(attributed) = self.attributed.get_mut(&(view, device)) {
                    for (other, grown) in attributed.other.iter_mut().zip(grown) {
                        *other += grown;
                    }
                }
            }
            self.join_top(view, entries, &name);
        }
    }

    /// The top owners of `view` not served yet start their series at 0.
    fn join_top(
        &mut self,
        view: OwnerView,
        entries: &[OwnerEntry],
        name: &impl Fn(&mut Attribution),
    ) {
        let mut ranked: Vec<&OwnerEntry> = entries
            .iter()
            .filter(|e| e.owner != OwnerKnown::Other)
            .collect();
        ranked.sort_by(|a, b| {
            (b.measures.commands, b.measures.user_ios)
                .cmp(&(a.measures.commands, a.measures.user_ios))
        });
        let mut joining = Attribution::default();
        for entry in ranked.into_iter().take(TOP_OWNERS) {
            let Some(id) = OwnerId::of(entry) else {
                continue;
            };
            if !self.members.contains_key(&(view, entry.device.clone(), id)) {
                view_entries_mut(&mut joining, view).push(entry.clone());
            }
        }
        if view_entries(&joining, view).is_empty() {
            return;
        }
        name(&mut joining);
        let mut joined = Vec::new();
        for entry in view_entries(&joining, view) {
            let Some(id) = OwnerId::of(entry) else {
                continue;
            };
            let now = counts(&entry.measures);
            let totals = now.map(|seen| Total { seen, served: 0 });
            let key = (view, entry.device.clone(), id);
            joined.push(key.clone());
            self.members.insert(
                key,
                Member {
                    label: owner_label(entry),
                    workload: entry.workload.clone(),
                    totals,
                },
            );
        }
        // Over capacity: the served owners (not just joined) with the fewest commands leave.
        let served = self.members.keys().filter(|(v, _, _)| *v == view).count();
        if served > SERVED_OWNERS {
            let mut leaving: Vec<_> = self
                .members
                .iter()
                .filter(|(key, _)| key.0 == view && !joined.contains(key))
                .map(|(key, member)| (member.totals[1].served, key.clone()))
                .collect();
            leaving.sort();
            for (_, key) in leaving.into_iter().take(served - SERVED_OWNERS) {
                // What it served stays served, as `other`'s: the sum holds.
                let Some(member) = self.members.remove(&key) else {
                    continue;
                };
                let (view, device, _) = key;
                let attributed = self.attributed.entry((view, device)).or_default();
                for (other, total) in attributed.other.iter_mut().zip(member.totals) {
                    *other += total.served;
                }
            }
        }
    }

    /// The engine restarted its counters from zero (SIGHUP).
    pub fn engine_was_reset(&mut self) {
        let totals = self
            .members
            .values_mut()
            .flat_map(|member| member.totals.iter_mut())
            .chain(
                self.attributed
                    .values_mut()
                    .flat_map(|attributed| attributed.all.iter_mut()),
            );
        totals.for_each(|total| total.seen = 0);
    }

    /// The samples of counter `index` of [`OWNER_COUNTERS`]: labels and value.
    pub fn samples(&self, index: usize) -> Vec<(Labels, u64)> {
        let members = self.members.iter().map(|((view, device, _), member)| {
            let mut labels = labels(device, *view, &member.label);
            let workload = &member.workload;
            for (name, value) in [
                ("pod_uid", &workload.pod_uid),
                ("qos", &workload.qos),
                ("container_id", &workload.container_id),
                ("unit", &workload.unit),
            ] {
                if let Some(value) = value {
                    labels.push((name, value.clone()));
                }
            }
            (labels, member.totals[index].served)
        });
        let others = self.attributed.iter().map(|((view, device), attributed)| {
            (labels(device, *view, "other"), attributed.other[index])
        });
        members.chain(others).collect()
    }
}

fn labels(device: &str, view: OwnerView, owner: &str) -> Labels {
    vec![
        ("device", device.to_string()),
        ("by", view_name(view).to_string()),
        ("owner", owner.to_string()),
    ]
}

fn counts(measures: &OwnerMeasures) -> [u64; 3] {
    OWNER_COUNTERS.map(|(_, _, value)| value(measures))
}

/// Observes each total; returns what each grew by.
fn observe(totals: &mut [Total; 3], now: [u64; 3]) -> [u64; 3] {
    let mut grown = [0; 3];
    for ((total, now), grown) in totals.iter_mut().zip(now).zip(&mut grown) {
        let before = total.served;
        total.observe(now);
        *grown = total.served - before;
    }
    grown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, device: &str, commands: u64) -> OwnerEntry {
        let measures = OwnerMeasures {
            user_ios: commands,
            commands,
            bytes: commands * 4096,
            ..OwnerMeasures::default()
        };
        let mut entry = OwnerEntry::new(OwnerKnown::Known, device.into(), measures);
        entry.pid = Some(pid);
        entry.comm = Some(format!("w{pid}"));
        entry
    }

    fn scrape(series: &mut OwnerSeries, entries: Vec<OwnerEntry>) {
        let attribution = Attribution {
            processes: entries,
            ..Attribution::default()
        };
        series.absorb(&attribution, |_| {});
    }

    /// commands by owner label on `device`.
    fn served(series: &OwnerSeries, device: &str) -> BTreeMap<String, u64> {
        series
            .samples(1)
            .into_iter()
            .filter(|(labels, _)| labels[0].1 == device)
            .map(|(labels, value)| (labels[2].1.clone(), value))
            .collect()
    }

    #[test]
    fn owners_join_at_zero_and_other_keeps_their_past() {
        let mut series = OwnerSeries::new(vec![OwnerView::Process]);
        scrape(&mut series, vec![process(1, "sda1", 10)]);
        // Joined at this scrape: its 10 commands so far are `other`'s.
        assert_eq!(served(&series, "sda1")["w1[1]"], 0);
        assert_eq!(served(&series, "sda1")["other"], 10);
        scrape(
            &mut series,
            vec![process(1, "sda1", 25), process(2, "sda1", 4)],
        );
        let now = served(&series, "sda1");
        assert_eq!(now["w1[1]"], 15);
        assert_eq!(now["w2[2]"], 0);
        assert_eq!(now["other"], 14);
        // The series sum to everything attributed there.
        assert_eq!(now.values().sum::<u64>(), 29);
    }

    #[test]
    fn series_never_go_down_through_a_reset_or_an_owner_leaving() {
        let mut series = OwnerSeries::new(vec![OwnerView::Process]);
        scrape(&mut series, vec![process(1, "sda", 10)]);
        scrape(&mut series, vec![process(1, "sda", 20)]);
        let before = served(&series, "sda");
        series.engine_was_reset();
        // After the reset the engine counts from 0 again, and owner 1 is gone.
        scrape(&mut series, vec![process(2, "sda", 3)]);
        let after = served(&series, "sda");
        for (label, value) in &before {
            assert!(after[label] >= *value, "{label}: {before:?} → {after:?}");
        }
        assert_eq!(after.values().sum::<u64>(), 20 + 3);
    }

    #[test]
    fn cardinality_is_bounded_and_the_sum_still_holds() {
        let mut series = OwnerSeries::new(vec![OwnerView::Process]);
        let mut total = 0;
        // Each scrape a new crowd of owners: at most SERVED_OWNERS series stay.
        for round in 0..10u32 {
            let crowd: Vec<OwnerEntry> = (0..30)
                .map(|i| {
                    process(
                        round * 100 + i,
                        "sda",
                        u64::from(i + 1) * (u64::from(round) + 1),
                    )
                })
                .collect();
            total += crowd.iter().map(|e| e.measures.commands).sum::<u64>();
            // The engine is cumulative: keep the earlier rounds' owners too.
            let mut all = crowd;
            for earlier in 0..round {
                all.extend((0..30).map(|i| {
                    process(
                        earlier * 100 + i,
                        "sda",
                        u64::from(i + 1) * (u64::from(earlier) + 1),
                    )
                }));
            }
            scrape(&mut series, all);
            let now = served(&series, "sda");
            assert!(now.len() <= SERVED_OWNERS + 1, "{} series", now.len());
            assert_eq!(now.values().sum::<u64>(), total);
        }
    }

    /// A pod's cgroup is served with the labels a PromQL join needs.
    #[test]
    fn a_pods_cgroup_carries_pod_qos_and_container_labels() {
        let mut series = OwnerSeries::new(vec![OwnerView::Cgroup]);
        let mut pod = OwnerEntry::new(
            OwnerKnown::Known,
            "sda".into(),
            OwnerMeasures {
                commands: 5,
                ..OwnerMeasures::default()
            },
        );
        pod.cgroup_id = Some(7);
        pod.cgroup = Some("/kubepods/burstable/pod…".into());
        pod.workload = Workload {
            pod_uid: Some("0d4a7e5c-3b1f-4c2a-9e8d-1f2a3b4c5d6e".into()),
            qos: Some("burstable".into()),
            container_id: Some("3f1c".into()),
            unit: None,
        };
        let attribution = Attribution {
            cgroups: vec![pod],
            ..Attribution::default()
        };
        series.absorb(&attribution, |_| {});
        let samples = series.samples(1);
        let (labels, _) = samples
            .iter()
            .find(|(labels, _)| labels.iter().any(|(name, _)| *name == "pod_uid"))
            .unwrap_or_else(|| panic!("no pod_uid label: {samples:?}"));
        let label = |name: &str| {
            labels
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            label("pod_uid"),
            Some("0d4a7e5c-3b1f-4c2a-9e8d-1f2a3b4c5d6e")
        );
        assert_eq!(label("qos"), Some("burstable"));
        assert_eq!(label("container_id"), Some("3f1c"));
        assert_eq!(label("unit"), None);
        assert_eq!(label("by"), Some("cgroup"));
    }

    #[test]
    fn labels_name_what_is_known() {
        let mut cgroup = OwnerEntry::new(OwnerKnown::Known, "sda".into(), OwnerMeasures::default());
        cgroup.cgroup_id = Some(42);
        assert_eq!(owner_label(&cgroup), "cgroup id 42");
        cgroup.cgroup = Some("/system.slice/db.service".into());
        assert_eq!(owner_label(&cgroup), "/system.slice/db.service");
        let mut file = OwnerEntry::new(OwnerKnown::Known, "sda".into(), OwnerMeasures::default());
        file.inode = Some(12);
        file.dev = Some("259:1".into());
        assert_eq!(owner_label(&file), "inode 12 on 259:1");
        let thread = OwnerEntry::new(
            OwnerKnown::KernelThread,
            "sda".into(),
            OwnerMeasures::default(),
        );
        assert_eq!(owner_label(&thread), "kernel thread");
    }
}
