//! `analyze FILE --perfetto OUT.json`: Chrome trace-event JSON for
//! ui.perfetto.dev. Each disk is a process; its user I/Os (per partition)
//! and its commands are threads. A flow links each user I/O to every
//! command that carried part of it.
//!
//! The chains are matched here from the recorded events, not in the engine:
//! the engine stays as it is, and this runs only when asked. A command
//! belongs to the open user I/Os on its disk whose sectors it overlaps; a
//! user I/O ends when completions have covered all its sectors.

use std::collections::HashMap;

use serde_json::{json, Value};
use tracer_common::{BlockEvent, EventKind};

use crate::geometry::{DevId, DiskGeometry};

/// User I/Os still open; past it the oldest is dropped (its completion was lost).
const MAX_OPEN: usize = 4096;

struct Slice {
    /// Index into `Matcher::tracks`.
    track: usize,
    start_ns: u64,
    end_ns: u64,
    name: &'static str,
    args: Value,
}

struct OpenIo {
    slice: usize,
    dev: u32,
    sector: u64,
    end: u64,
    done: u64,
}

struct OpenCommand {
    slice: usize,
    ios: Vec<usize>,
}

/// Collects slices and flows while the recording is replayed.
pub struct Matcher {
    geometry: Vec<DiskGeometry>,
    /// (disk dev_t, track name), one per process/thread group.
    tracks: Vec<(u32, String)>,
    slices: Vec<Slice>,
    /// (user I/O slice, command slice).
    flows: Vec<(usize, usize)>,
    open_ios: Vec<OpenIo>,
    commands: HashMap<(u32, u64), OpenCommand>,
    splits: Vec<(usize, u64)>,
}

impl Matcher {
    pub fn new(geometry: Vec<DiskGeometry>) -> Matcher {
        Matcher {
            geometry,
            tracks: Vec::new(),
            slices: Vec::new(),
            flows: Vec::new(),
            open_ios: Vec::new(),
            commands: HashMap::new(),
            splits: Vec::new(),
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
            .find(|p| sector >= p.start && sector < p.start + p.size)
            .map(|p| p.name.clone())
    }

    pub fn see(&mut self, event: &BlockEvent) {
        // Imported or corrupt input may hold any numbers: nothing here may overflow.
        let end = event.sector.saturating_add(u64::from(event.nr_sector));
        let rwbs = rwbs(event);
        match event.kind {
            k if k == EventKind::Queue as u8 => {
                let place = self
                    .partition_name(event.dev, event.sector)
                    .unwrap_or_else(|| "disk".into());
                let track = self.track(event.dev, format!("{place} user I/Os"));
                self.slices.push(Slice {
                    track,
                    start_ns: event.ts_ns,
                    end_ns: event.ts_ns,
                    name: "user I/O",
                    args: json!({"sector": event.sector, "bytes": u64::from(event.nr_sector) * 512, "rwbs": rwbs}),
                });
                if self.open_ios.len() >= MAX_OPEN {
                    self.open_ios.remove(0);
                }
                self.open_ios.push(OpenIo {
                    slice: self.slices.len() - 1,
                    dev: event.dev,
                    sector: event.sector,
                    end,
                    done: 0,
                });
            }
            k if k == EventKind::Split as u8 => {
                if let Some(io) = self.open_ios.iter().rev().find(|io| {
                    io.dev == event.dev && io.sector <= event.sector && event.sector < io.end
                }) {
                    self.splits.push((io.slice, event.ts_ns));
                }
            }
            k if k == EventKind::Issue as u8 => {
                let track = self.track(event.dev, "commands".into());
                self.slices.push(Slice {
                    track,
                    start_ns: event.ts_ns,
                    end_ns: event.ts_ns,
                    name: "command",
                    args: json!({"sector": event.sector, "bytes": u64::from(event.nr_sector) * 512, "rwbs": rwbs}),
                });
                let ios = self
                    .open_ios
                    .iter()
                    .filter(|io| io.dev == event.dev && io.sector < end && event.sector < io.end)
                    .map(|io| io.slice)
                    .collect();
                // A requeued command issued again replaces its earlier slice's end.
                self.commands.insert(
                    (event.dev, event.sector),
                    OpenCommand {
                        slice: self.slices.len() - 1,
                        ios,
                    },
                );
            }
            k if k == EventKind::Complete as u8 => {
                if let Some(command) = self.commands.remove(&(event.dev, event.sector)) {
                    let slice = &mut self.slices[command.slice];
                    slice.end_ns = slice.start_ns.max(event.ts_ns);
                    for io in command.ios {
                        self.flows.push((io, command.slice));
                    }
                }
                let slices = &mut self.slices;
                self.open_ios.retain_mut(|io| {
                    if io.dev != event.dev || io.sector >= end || event.sector >= io.end {
                        return true;
                    }
                    io.done += io.end.min(end) - io.sector.max(event.sector);
                    let slice = &mut slices[io.slice];
                    slice.end_ns = slice.end_ns.max(event.ts_ns);
                    io.done < io.end - io.sector
                });
            }
            _ => {}
        }
    }

    /// The trace-event document.
    pub fn finish(self) -> Value {
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
            tid_of[i] = slice.track * 1000 + lane + 1;
        }
        for (track, track_lanes) in lanes.iter().enumerate() {
            let (dev, name) = &self.tracks[track];
            for lane in 0..track_lanes.len() {
                events.push(json!({"ph": "M", "name": "thread_name", "pid": pid_of(*dev), "tid": track * 1000 + lane + 1, "args": {"name": format!("{name} #{lane}")}}));
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
        for &(io, ts_ns) in &self.splits {
            let slice = &self.slices[io];
            events.push(json!({"ph": "i", "s": "t", "name": "split", "pid": pid_of(self.tracks[slice.track].0), "tid": tid_of[io], "ts": us(ts_ns)}));
        }
        for (id, &(io, command)) in self.flows.iter().enumerate() {
            let (from, to) = (&self.slices[io], &self.slices[command]);
            events.push(json!({"ph": "s", "name": "carried by", "cat": "block", "id": id, "pid": pid_of(self.tracks[from.track].0), "tid": tid_of[io], "ts": us(from.start_ns)}));
            events.push(json!({"ph": "f", "bp": "e", "name": "carried by", "cat": "block", "id": id, "pid": pid_of(self.tracks[to.track].0), "tid": tid_of[command], "ts": us(to.start_ns)}));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ns"})
    }
}

fn rwbs(event: &BlockEvent) -> String {
    let end = event
        .rwbs
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(event.rwbs.len());
    String::from_utf8_lossy(&event.rwbs[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut matcher = Matcher::new(Vec::new());
        for (base, t) in [(0u64, 0u64), (2048, 500)] {
            matcher.see(&event(EventKind::Queue, t, base, 2048));
            matcher.see(&event(EventKind::Split, t + 10, base, 1024));
            matcher.see(&event(EventKind::Issue, t + 100, base, 1024));
            matcher.see(&event(EventKind::Issue, t + 110, base + 1024, 1024));
        }
        for (base, t) in [(0u64, 2000u64), (2048, 3000)] {
            matcher.see(&event(EventKind::Complete, t, base, 1024));
            matcher.see(&event(EventKind::Complete, t + 50, base + 1024, 1024));
        }
        let text = serde_json::to_string(&matcher.finish()).unwrap();
        serde_json::from_str(&text).unwrap()
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
    fn out_of_order_and_extreme_numbers_do_not_panic() {
        let mut matcher = Matcher::new(Vec::new());
        matcher.see(&event(EventKind::Queue, 5000, u64::MAX - 1, 8));
        matcher.see(&event(EventKind::Issue, 5000, u64::MAX - 1, 8));
        // Completed "before" it was issued (microsecond timestamps from an import).
        matcher.see(&event(EventKind::Complete, 4000, u64::MAX - 1, 8));
        matcher.see(&event(EventKind::Complete, 1, 0, u32::MAX));
        let trace = matcher.finish();
        let slices = of_phase(&trace, "X");
        assert_eq!(slices.len(), 2);
        assert!(slices.iter().all(|s| s["dur"] == 0.0));
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
