//! `analyze FILE --perfetto OUT.json`: Chrome trace-event JSON for
//! ui.perfetto.dev. Each disk is a process; its user I/Os (per partition)
//! and its commands are threads. A flow links each user I/O to every
//! command that carried part of it.
//!
//! The slices are the engine's own chains ([`Outcome`]s), not a second
//! matching of raw events, so they say what the report says. A command
//! slice runs from its last issue to its last completion (the report's
//! issue→complete); a requeued command's earlier life, from its first issue
//! until the driver took it again, is one "requeued" slice before it.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::engine::outcome::{CommandId, DropReason, IoId, Outcome};
use crate::geometry::{DevId, DiskGeometry};

struct Slice {
    /// Index into `Matcher::tracks`.
    track: usize,
    start_ns: u64,
    end_ns: u64,
    name: &'static str,
    args: Value,
}

/// Collects slices and flows while the recording is replayed.
pub struct Matcher {
    geometry: Vec<DiskGeometry>,
    /// (disk dev_t, track name), one per process/thread group.
    tracks: Vec<(u32, String)>,
    slices: Vec<Slice>,
    /// (user I/O slice, command slice).
    flows: Vec<(usize, usize)>,
    open_ios: HashMap<IoId, usize>,
    commands: HashMap<CommandId, usize>,
    /// (slice, when, what): splits on user I/Os, requeues on commands.
    instants: Vec<(usize, u64, &'static str)>,
}

impl Matcher {
    pub fn new(geometry: Vec<DiskGeometry>) -> Matcher {
        Matcher {
            geometry,
            tracks: Vec::new(),
            slices: Vec::new(),
            flows: Vec::new(),
            open_ios: HashMap::new(),
            commands: HashMap::new(),
            instants: Vec::new(),
        }
    }

    fn track(&mut self, dev: u32, name: String) -> usize {
        match self.tracks.iter().position(|t| t.0 == dev && t.1 == name) {
            Some(at) => at,
            None => {
                self.tracks.push((dev, name));
                self.tracks.len() - 1
            }
        }
    }

    fn partition_name(&self, dev: u32, sector: u64) -> Option<String> {
        let disk = self
            .geometry
            .iter()
            .find(|d| d.dev == Some(DevId::from_kernel(dev)))?;
        disk.partitions
            .iter()
            .find(|p| sector >= p.start && sector - p.start < p.size)
            .map(|p| p.name.clone())
    }

    fn open_slice(&mut self, track: usize, ts_ns: u64, name: &'static str, args: Value) -> usize {
        self.slices.push(Slice {
            track,
            start_ns: ts_ns,
            end_ns: ts_ns,
            name,
            args,
        });
        self.slices.len() - 1
    }

    fn end_slice(&mut self, slice: usize, ts_ns: u64) {
        let slice = &mut self.slices[slice];
        slice.end_ns = slice.end_ns.max(ts_ns);
    }

    pub(crate) fn see(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Queued {
                io,
                dev,
                sector,
                sectors,
                op,
                ts_ns,
                ..
            } => {
                let place = self
                    .partition_name(dev, sector)
                    .unwrap_or_else(|| "disk".into());
                let track = self.track(dev, format!("{place} user I/Os"));
                let args =
                    json!({"sector": sector, "bytes": u64::from(sectors) * 512, "op": op.as_str()});
                let slice = self.open_slice(track, ts_ns, "user I/O", args);
                if let Some(io) = io {
                    self.open_ios.insert(io, slice);
                }
            }
            Outcome::Split {
                io: Some(io),
                ts_ns,
                ..
            } => {
                if let Some(&slice) = self.open_ios.get(&io) {
                    self.instants.push((slice, ts_ns, "split"));
                }
            }
            Outcome::Issued {
                command,
                dev,
                sector,
                sectors,
                op,
                ts_ns,
                ..
            } => {
                let track = self.track(dev, "commands".into());
                let args = json!({"sector": sector, "bytes": sectors * 512, "op": op.as_str()});
                let slice = self.open_slice(track, ts_ns, "command", args);
                self.commands.insert(command, slice);
            }
            Outcome::Carries { command, io } => {
                if let (Some(&io), Some(&command)) =
                    (self.open_ios.get(&io), self.commands.get(&command))
                {
                    self.flows.push((io, command));
                }
            }
            Outcome::Requeued {
                command: Some(command),
                ts_ns,
                ..
            } => {
                if let Some(&slice) = self.commands.get(&command) {
                    self.instants.push((slice, ts_ns, "requeued"));
                    let args = &mut self.slices[slice].args;
                    args["requeues"] = json!(args["requeues"].as_u64().unwrap_or(0) + 1);
                }
            }
            Outcome::Reissued {
                command,
                ts_ns,
                waited_ns,
                ..
            } => {
                if let Some(&slice) = self.commands.get(&command) {
                    // Until now it was waiting: that part becomes the
                    // "requeued" slice, and the command starts again here.
                    let waited = &mut self.slices[slice];
                    let (track, first_ns) = (waited.track, waited.start_ns);
                    let mut args = waited.args.clone();
                    args["waited_us"] = json!(waited_ns / 1000);
                    waited.start_ns = ts_ns;
                    waited.end_ns = ts_ns;
                    let before = self.open_slice(track, first_ns, "requeued", args);
                    self.end_slice(before, ts_ns);
                }
            }
            Outcome::Completed {
                command,
                ts_ns,
                whole,
                ..
            } => {
                let slice = match whole {
                    true => self.commands.remove(&command),
                    false => self.commands.get(&command).copied(),
                };
                if let Some(slice) = slice {
                    self.end_slice(slice, ts_ns);
                }
            }
            // Given up without its completion: never shown as finished.
            Outcome::CommandDropped { command, reason } => {
                if let Some(slice) = self.commands.remove(&command) {
                    let args = &mut self.slices[slice].args;
                    args["unfinished"] = json!(true);
                    args["dropped"] = json!(dropped(reason));
                }
            }
            Outcome::Finished { io, ts_ns, .. } => {
                if let Some(slice) = self.open_ios.remove(&io) {
                    self.end_slice(slice, ts_ns);
                }
            }
            // Counted by the accounting; nothing of a chain to draw.
            Outcome::Split { io: None, .. }
            | Outcome::Merged { .. }
            | Outcome::Dropped { .. }
            | Outcome::Waited { .. }
            | Outcome::ReachedDisk { .. }
            | Outcome::Requeued { command: None, .. }
            | Outcome::FlushFinished { .. }
            | Outcome::Failed { .. } => {}
        }
    }

    /// The trace-event document.
    pub fn finish(mut self) -> Value {
        // Still open when the trace ended: say so rather than show a finished slice.
        for &slice in self.commands.values().chain(self.open_ios.values()) {
            self.slices[slice].args["unfinished"] = json!(true);
        }
        let mut events = Vec::new();
        let mut disks: Vec<u32> = self.tracks.iter().map(|t| t.0).collect();
        disks.sort_unstable();
        disks.dedup();
        let pid_of = |dev: u32| disks.iter().position(|d| *d == dev).unwrap_or(0) + 1;
        for dev in &disks {
            let id = DevId::from_kernel(*dev);
            let name = self
                .geometry
                .iter()
                .find(|d| d.dev == Some(id))
                .map(|d| d.name.clone())
                .unwrap_or_else(|| format!("{}:{}", id.major, id.minor));
            events.push(json!({"ph": "M", "name": "process_name", "pid": pid_of(*dev), "tid": 0, "args": {"name": name}}));
        }
        // Slices on one thread must nest: overlapping ones go to separate lanes.
        let mut order: Vec<usize> = (0..self.slices.len()).collect();
        order.sort_by_key(|&i| (self.slices[i].start_ns, i));
        let mut lanes: Vec<Vec<u64>> = vec![Vec::new(); self.tracks.len()];
        let mut tid_of = vec![0usize; self.slices.len()];
        for &i in &order {
            let slice = &self.slices[i];
            let track_lanes = &mut lanes[slice.track];
            let lane = match track_lanes.iter().position(|free| *free <= slice.start_ns) {
                Some(lane) => lane,
                None => {
                    track_lanes.push(0);
                    track_lanes.len() - 1
                }
            };
            // Zero-length slices still take their instant.
            track_lanes[lane] = slice.end_ns.max(slice.start_ns.saturating_add(1));
            tid_of[i] = lane;
        }
        // Each track's lanes get the next thread ids, after every lane of
        // the tracks before it: no two tracks share a thread, whatever the
        // number of lanes (in-flight user I/Os or commands) each needs.
        let first_tid: Vec<usize> = lanes
            .iter()
            .scan(1, |next, track_lanes| {
                let first = *next;
                *next += track_lanes.len();
                Some(first)
            })
            .collect();
        for (i, slice) in self.slices.iter().enumerate() {
            tid_of[i] += first_tid[slice.track];
        }
        for (track, track_lanes) in lanes.iter().enumerate() {
            let (dev, name) = &self.tracks[track];
            for lane in 0..track_lanes.len() {
                events.push(json!({"ph": "M", "name": "thread_name", "pid": pid_of(*dev), "tid": first_tid[track] + lane, "args": {"name": format!("{name} #{lane}")}}));
            }
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        for (i, slice) in self.slices.iter().enumerate() {
            events.push(json!({
                "ph": "X", "name": slice.name, "cat": "block",
                "pid": pid_of(self.tracks[slice.track].0), "tid": tid_of[i],
                "ts": us(slice.start_ns), "dur": us(slice.end_ns.saturating_sub(slice.start_ns)),
                "args": slice.args,
            }));
        }
        for &(at, ts_ns, name) in &self.instants {
            let slice = &self.slices[at];
            events.push(json!({"ph": "i", "s": "t", "name": name, "pid": pid_of(self.tracks[slice.track].0), "tid": tid_of[at], "ts": us(ts_ns)}));
        }
        for (id, &(io, command)) in self.flows.iter().enumerate() {
            let (from, to) = (&self.slices[io], &self.slices[command]);
            events.push(json!({"ph": "s", "name": "carried by", "cat": "block", "id": id, "pid": pid_of(self.tracks[from.track].0), "tid": tid_of[io], "ts": us(from.start_ns)}));
            events.push(json!({"ph": "f", "bp": "e", "name": "carried by", "cat": "block", "id": id, "pid": pid_of(self.tracks[to.track].0), "tid": tid_of[command], "ts": us(to.start_ns)}));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ns"})
    }
}

/// Why a command's completion was never seen, as its slice says it.
fn dropped(reason: DropReason) -> &'static str {
    match reason {
        DropReason::AgedOut => "aged_out",
        DropReason::Evicted => "evicted",
        DropReason::CompletionLost => "completion_lost",
        DropReason::RingDropped => "ring_dropped",
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{BlockEvent, EventKind};

    use super::*;

    /// The events through a fresh engine, its outcomes into a matcher.
    fn matched(events: &[BlockEvent]) -> Value {
        let mut matcher = Matcher::new(Vec::new());
        for outcome in crate::engine::outcome::of_events(events) {
            matcher.see(&outcome);
        }
        let text = serde_json::to_string(&matcher.finish()).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn event(kind: EventKind, ts_ns: u64, sector: u64, nr_sector: u32) -> BlockEvent {
        let mut rwbs = [0; tracer_common::RWBS_BYTES];
        rwbs[0] = b'W';
        BlockEvent {
            ts_ns,
            sector,
            aux_sector: 0,
            dev: 7 << 20,
            aux_dev: 0,
            nr_sector,
            tgid: 1,
            rwbs,
            kind: kind as u8,
            ..BlockEvent::ZERO
        }
    }

    /// Two overlapping 1 MiB writes, each split into two commands.
    fn trace() -> Value {
        let mut events = Vec::new();
        for (base, t) in [(0u64, 0u64), (2048, 500)] {
            events.push(event(EventKind::Queue, t, base, 2048));
            events.push(BlockEvent {
                aux_sector: base + 1024,
                ..event(EventKind::Split, t + 10, base, 0)
            });
            events.push(event(EventKind::Issue, t + 100, base, 1024));
            events.push(event(EventKind::Issue, t + 110, base + 1024, 1024));
        }
        for (base, t) in [(0u64, 2000u64), (2048, 3000)] {
            events.push(event(EventKind::Complete, t, base, 1024));
            events.push(event(EventKind::Complete, t + 50, base + 1024, 1024));
        }
        matched(&events)
    }

    fn of_phase<'a>(trace: &'a Value, ph: &str) -> Vec<&'a Value> {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == ph)
            .collect()
    }

    #[test]
    fn each_user_io_flows_to_its_commands() {
        let trace = trace();
        let slices = of_phase(&trace, "X");
        assert_eq!(slices.iter().filter(|s| s["name"] == "user I/O").count(), 2);
        assert_eq!(slices.iter().filter(|s| s["name"] == "command").count(), 4);
        let first = slices
            .iter()
            .find(|s| s["name"] == "user I/O" && s["ts"] == 0.0)
            .unwrap();
        // Ends when its second command completes: 2050 ns.
        assert_eq!(first["dur"], 2.05);
        let starts = of_phase(&trace, "s");
        let ends = of_phase(&trace, "f");
        assert_eq!(starts.len(), 4);
        for start in &starts {
            let end = ends.iter().find(|f| f["id"] == start["id"]).unwrap();
            assert_eq!(end["bp"], "e");
        }
        assert_eq!(starts.len(), ends.len());
        assert_eq!(of_phase(&trace, "i").len(), 2);
    }

    #[test]
    fn slices_still_open_at_the_end_say_so() {
        let trace = matched(&[
            event(EventKind::Queue, 0, 0, 8),
            event(EventKind::Issue, 1_000, 0, 8),
        ]);
        let slices = of_phase(&trace, "X");
        assert_eq!(slices.len(), 2);
        assert!(slices.iter().all(|s| s["args"]["unfinished"] == true));
        let done = matched(&[
            event(EventKind::Queue, 0, 0, 8),
            event(EventKind::Issue, 1_000, 0, 8),
            event(EventKind::Complete, 2_000, 0, 8),
        ]);
        assert!(of_phase(&done, "X")
            .iter()
            .all(|s| s["args"].get("unfinished").is_none()));
    }

    #[test]
    fn a_command_given_up_is_unfinished_not_a_zero_length_command() {
        // Request 5 issued at sector 0, then issued again at 8 with no
        // completion between: the first command's completion was lost.
        let named = |event: BlockEvent, request: u64| BlockEvent {
            aux_sector: request,
            ..event
        };
        let trace = matched(&[
            event(EventKind::Queue, 0, 0, 8),
            named(event(EventKind::Issue, 1_000, 0, 8), 5),
            event(EventKind::Queue, 2_000, 8, 8),
            named(event(EventKind::Issue, 3_000, 8, 8), 5),
            named(event(EventKind::Complete, 4_000, 8, 8), 5),
        ]);
        let commands: Vec<&Value> = of_phase(&trace, "X")
            .into_iter()
            .filter(|s| s["name"] == "command")
            .collect();
        assert_eq!(commands.len(), 2, "{commands:?}");
        let lost = commands.iter().find(|s| s["args"]["sector"] == 0).unwrap();
        assert_eq!(lost["args"]["unfinished"], true, "{lost}");
        assert_eq!(lost["args"]["dropped"], "completion_lost", "{lost}");
        let done = commands.iter().find(|s| s["args"]["sector"] == 8).unwrap();
        assert!(done["args"].get("unfinished").is_none(), "{done}");
    }

    #[test]
    fn out_of_order_and_extreme_numbers_do_not_panic() {
        let trace = matched(&[
            event(EventKind::Queue, 5000, u64::MAX - 1, 8),
            event(EventKind::Issue, 5000, u64::MAX - 1, 8),
            // Completed "before" it was issued (microsecond timestamps from an import).
            event(EventKind::Complete, 4000, u64::MAX - 1, 8),
            event(EventKind::Complete, 1, 0, u32::MAX),
        ]);
        let slices = of_phase(&trace, "X");
        assert_eq!(slices.len(), 2);
        assert!(slices.iter().all(|s| s["dur"] == 0.0));
    }

    #[test]
    fn a_requeued_command_is_one_slice_to_its_last_completion() {
        let trace = matched(&[
            event(EventKind::Queue, 0, 0, 16),
            event(EventKind::Issue, 1_000, 0, 16),
            event(EventKind::Requeue, 2_000, 0, 16),
            event(EventKind::Issue, 2_002_000, 0, 16),
            event(EventKind::Complete, 2_010_000, 0, 8),
            event(EventKind::Complete, 2_052_000, 8, 8),
        ]);
        let slices = of_phase(&trace, "X");
        let commands: Vec<_> = slices.iter().filter(|s| s["name"] == "command").collect();
        assert_eq!(commands.len(), 1);
        // The report's issue→complete: from the re-issue, 50 µs.
        assert_eq!(commands[0]["ts"], 2002.0);
        assert_eq!(commands[0]["dur"], 50.0);
        assert_eq!(commands[0]["args"]["requeues"], 1);
        let waited: Vec<_> = slices.iter().filter(|s| s["name"] == "requeued").collect();
        assert_eq!(waited.len(), 1);
        assert_eq!(waited[0]["ts"], 1.0);
        assert_eq!(waited[0]["dur"], 2001.0);
        assert_eq!(waited[0]["args"]["waited_us"], 2000);
        let instants: Vec<_> = of_phase(&trace, "i")
            .into_iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(instants, ["requeued"]);
        assert_eq!(of_phase(&trace, "s").len(), 1);
    }

    /// A plugged writeback, by blk-mq's rules: `requests` × `bios` 4 KiB
    /// writes queued back to back, every bio after a request's first
    /// back-merged into it, then each request issued whole and completed.
    /// Every user I/O stays in flight until its request completes.
    fn plugged_writeback(requests: u64, bios: u64) -> Vec<BlockEvent> {
        let mut events = Vec::new();
        let mut t = 0;
        for r in 0..requests {
            for b in 0..bios {
                let sector = (r * bios + b) * 8;
                events.push(event(EventKind::Queue, t, sector, 8));
                if b > 0 {
                    events.push(event(EventKind::Backmerge, t + 1, sector, 8));
                }
                t += 10;
            }
        }
        let sectors = u32::try_from(bios * 8).unwrap();
        for r in 0..requests {
            events.push(event(EventKind::Issue, t, r * bios * 8, sectors));
            t += 10;
        }
        for r in 0..requests {
            events.push(event(EventKind::Complete, t, r * bios * 8, sectors));
            t += 10;
        }
        events
    }

    #[test]
    fn lanes_of_each_kind_have_their_own_threads_past_a_thousand() {
        // 2,048 user I/Os in flight at once (over 1,000 lanes), 64 commands.
        let trace = matched(&plugged_writeback(64, 32));
        let mut thread_names: HashMap<u64, String> = HashMap::new();
        for meta in of_phase(&trace, "M") {
            if meta["name"] == "thread_name" {
                let tid = meta["tid"].as_u64().unwrap();
                let name = meta["args"]["name"].as_str().unwrap().to_string();
                assert!(
                    thread_names.insert(tid, name.clone()).is_none(),
                    "thread {tid} named twice (second: {name})"
                );
            }
        }
        let slices = of_phase(&trace, "X");
        let of_kind = |kind: &str| -> Vec<u64> {
            slices
                .iter()
                .filter(|s| s["name"] == kind)
                .map(|s| s["tid"].as_u64().unwrap())
                .collect()
        };
        let (user_ios, commands) = (of_kind("user I/O"), of_kind("command"));
        assert_eq!(user_ios.len(), 2048);
        assert_eq!(commands.len(), 64);
        let lanes = |tids: &[u64]| tids.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(
            lanes(&user_ios) > 1000,
            "{} user I/O lanes",
            lanes(&user_ios)
        );
        for (tids, track) in [(&user_ios, "disk user I/Os #"), (&commands, "commands #")] {
            for tid in tids {
                let name = &thread_names[tid];
                assert!(name.starts_with(track), "a slice of {track} on {name}");
            }
        }
        assert!(user_ios.iter().all(|tid| !commands.contains(tid)));
        // Every flow ends on a command's thread and starts on a user I/O's.
        for (phase, track) in [("s", "disk user I/Os #"), ("f", "commands #")] {
            for flow in of_phase(&trace, phase) {
                let name = &thread_names[&flow["tid"].as_u64().unwrap()];
                assert!(name.starts_with(track), "{flow} on {name}");
            }
        }
    }

    #[test]
    fn slices_nest_on_their_threads_and_threads_are_named() {
        let trace = trace();
        let slices = of_phase(&trace, "X");
        let names = of_phase(&trace, "M");
        for a in &slices {
            assert!(names.iter().any(|m| m["name"] == "thread_name"
                && m["tid"] == a["tid"]
                && m["pid"] == a["pid"]));
            assert!(names
                .iter()
                .any(|m| m["name"] == "process_name" && m["pid"] == a["pid"]));
            let (a0, a1) = (
                a["ts"].as_f64().unwrap(),
                a["ts"].as_f64().unwrap() + a["dur"].as_f64().unwrap(),
            );
            for b in &slices {
                if std::ptr::eq(*a, *b) || a["tid"] != b["tid"] || a["pid"] != b["pid"] {
                    continue;
                }
                let (b0, b1) = (
                    b["ts"].as_f64().unwrap(),
                    b["ts"].as_f64().unwrap() + b["dur"].as_f64().unwrap(),
                );
                let disjoint = a1 <= b0 || b1 <= a0;
                let nested = (a0 <= b0 && b1 <= a1) || (b0 <= a0 && a1 <= b1);
                assert!(disjoint || nested, "{a} and {b} overlap on one thread");
            }
        }
    }
}
