//! The device's service model, fitted live from the traced commands, per
//! disk and operation: what a command costs the device, so a what-if can say
//! how long the commands after the fix would take, not only how many.
//!
//! - **Busy time against size.** Each whole, measured completion adds its
//!   size, its issue→complete time (D2C) and the busy time it added (from
//!   its issue, or from the completion before it while the device was still
//!   busy) to the sums of its power-of-two size bucket: integer adds, no
//!   allocation. The fit is a weighted least-squares line
//!   `busy = a + b·bytes` over the buckets' means (weight: the bucket's
//!   commands); `a` is the device time a command costs, `b` the time a byte
//!   costs. Fitting busy time rather than D2C keeps queueing out: 32
//!   fragments queued at once behind a 300 IOPS throttle wait up to 100 ms
//!   each, yet each adds 3.3 ms. A negative slope is refitted as `b = 0`, a
//!   negative intercept as a line through the origin.
//! - **Concurrency.** The busy time is the union of the commands'
//!   `[issue, complete]` intervals, kept as the current busy period while
//!   completions come in (in completion order, so a long command that
//!   straddles an idle gap others left is clipped at that gap's start: a
//!   small undercount). By Little's law the time-weighted commands in flight
//!   while busy are `ΣD2C / busy`.
//! - **Ceiling.** The bandwidth the fit implies when commands cost nothing,
//!   `1 / b`.
//! - **Replay.** Commands of a workload take `a·N + b·bytes` of device time:
//!   at the concurrency the traced workload had.
//!
//! - **Depth.** A command issued while the device was idle adds its whole
//!   D2C (a latency); one issued behind others adds the gap since the last
//!   completion (an inverse throughput). When the sizes that make the line
//!   ran at different depths (4 KiB writes one at a time, 32 fragments of a
//!   split write queued together), their difference is mostly the depth's:
//!   behind a 200 IOPS throttle the lone 4 KiB writes add 4.4 ms and the
//!   queued 32 KiB ones 4.9 ms, because the throttle's bucket refills while
//!   the writer thinks. Such a size effect counts only past
//!   [`CROSS_DEPTH_SIZE_EFFECT`]; a real bandwidth cost is far past it.
//!
//! It does not apply (and says why) with fewer than [`MIN_COMMANDS`]
//! measured commands, or when nearly every command had one size, so the
//! cost of a command cannot be told from the cost of its bytes.

use crate::blk::SECTOR_BYTES;
use crate::model::{ServiceBound, ServiceModel, TimeUnavailable};

/// Power-of-two size buckets, in sectors: `[2^k, 2^(k+1))`, the last open.
pub const SIZE_BUCKETS: usize = 24;

/// Fewer measured commands than this fit nothing.
pub const MIN_COMMANDS: u64 = 32;

/// The largest size's cost over the smallest's below which size costs nothing.
const FLAT_SIZE_EFFECT: f64 = 0.1;

/// The same, when the smallest and the largest sizes ran at different depths.
const CROSS_DEPTH_SIZE_EFFECT: f64 = 0.5;

/// Below this many commands in flight the device served one at a time.
const LATENCY_BOUND_IN_FLIGHT: f64 = 1.5;

/// What one disk's commands of one op cost, summed as they complete.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceSamples {
    commands: u64,
    count: [u64; SIZE_BUCKETS],
    sectors: [u64; SIZE_BUCKETS],
    d2c_ns: [u64; SIZE_BUCKETS],
    /// Commands issued while nothing else was in flight.
    alone: [u64; SIZE_BUCKETS],
    /// Busy time each bucket's completions added.
    added_ns: [u64; SIZE_BUCKETS],
    /// Busy time of the busy periods already closed.
    closed_busy_ns: u64,
    /// End of the last closed period: the open one does not reach back past it.
    closed_end: u64,
    period_start: u64,
    period_end: u64,
    first_issue_ns: u64,
}

/// The fit of one disk's commands of one op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServiceFit {
    pub commands: u64,
    pub bytes: u64,
    /// `a`: device-busy ns a command costs whatever its size.
    pub per_command_ns: f64,
    /// `b`: device-busy ns per byte.
    pub ns_per_byte: f64,
    /// Time-weighted commands in flight while the device was busy.
    pub in_flight: f64,
    /// `1 / b`; 0 when bytes cost nothing measurable.
    pub ceiling_bytes_per_s: f64,
    pub busy_ns: u64,
    /// First issue to last completion.
    pub span_ns: u64,
    pub bound: ServiceBound,
}

impl ServiceSamples {
    /// One whole command of `sectors` issued at `issue_ns`, completed at
    /// `done_ns` (never before an earlier completion: engine time is monotonic).
    #[inline]
    pub fn complete(&mut self, issue_ns: u64, done_ns: u64, sectors: u64) {
        let bucket = ((63 - (sectors | 1).leading_zeros()) as usize).min(SIZE_BUCKETS - 1);
        let issue_ns = issue_ns.min(done_ns);
        self.count[bucket] += 1;
        self.sectors[bucket] += sectors;
        self.d2c_ns[bucket] += done_ns - issue_ns;
        let alone = self.commands == 0 || issue_ns > self.period_end;
        self.alone[bucket] += u64::from(alone);
        self.added_ns[bucket] += if alone {
            done_ns - issue_ns
        } else {
            done_ns.saturating_sub(self.period_end)
        };
        if self.commands == 0 {
            self.first_issue_ns = issue_ns;
            self.period_start = issue_ns;
            self.period_end = done_ns;
        } else if issue_ns > self.period_end {
            self.closed_busy_ns += self.period_end - self.period_start;
            self.closed_end = self.period_end;
            self.period_start = issue_ns;
            self.period_end = done_ns;
        } else {
            self.period_start = self.period_start.min(issue_ns.max(self.closed_end));
            self.period_end = self.period_end.max(done_ns);
        }
        self.first_issue_ns = self.first_issue_ns.min(issue_ns);
        self.commands += 1;
    }

    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// Time at least one command was in flight.
    pub fn busy_ns(&self) -> u64 {
        self.closed_busy_ns + (self.period_end - self.period_start)
    }

    /// The fit, or why there is none.
    pub fn fit(&self) -> Result<ServiceFit, TimeUnavailable> {
        if self.commands < MIN_COMMANDS {
            return Err(TimeUnavailable::TooFewCommands);
        }
        let busy_ns = self.busy_ns();
        let total_d2c: u64 = self.d2c_ns.iter().sum();
        if busy_ns == 0 || total_d2c == 0 {
            return Err(TimeUnavailable::NoServiceTime);
        }
        // Buckets that hold a real share of the commands must show two sizes.
        let significant = (self.commands / 50).max(2);
        let buckets = || (0..SIZE_BUCKETS).filter(|&k| self.count[k] >= significant);
        let mean = |k: usize| self.sectors[k] as f64 / self.count[k] as f64;
        let (Some(first), Some(last)) = (buckets().next(), buckets().next_back()) else {
            return Err(TimeUnavailable::OneCommandSize);
        };
        let (smallest, largest) = (mean(first), mean(last));
        if largest < 1.5 * smallest {
            return Err(TimeUnavailable::OneCommandSize);
        }
        let mostly_alone = |k: usize| 2 * self.alone[k] > self.count[k];
        let size_effect = if mostly_alone(first) == mostly_alone(last) {
            FLAT_SIZE_EFFECT
        } else {
            CROSS_DEPTH_SIZE_EFFECT
        };
        let (mut w, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for k in 0..SIZE_BUCKETS {
            let n = self.count[k] as f64;
            if n == 0.0 {
                continue;
            }
            let x = (self.sectors[k] * SECTOR_BYTES) as f64;
            let y = self.added_ns[k] as f64;
            w += n;
            sx += x;
            sy += y;
            sxx += x * x / n;
            sxy += x * y / n;
        }
        let denominator = w * sxx - sx * sx;
        let mut b = if denominator > 0.0 {
            (w * sxy - sx * sy) / denominator
        } else {
            0.0
        };
        let mut a = (sy - b * sx) / w;
        // A small size effect is not told from noise (or from depth), and a
        // fix's larger commands would extrapolate it far.
        let sector = SECTOR_BYTES as f64;
        let flat = a > 0.0
            && b * (largest - smallest) * sector < size_effect * (a + b * smallest * sector);
        if b < 0.0 || flat {
            b = 0.0;
            a = sy / w;
        } else if a < 0.0 {
            a = 0.0;
            b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        }
        let in_flight = (total_d2c as f64 / busy_ns as f64).max(1.0);
        // Free commands would leave the bytes: the bandwidth the fit implies.
        let ceiling_bytes_per_s = if b > 0.0 { 1e9 / b } else { 0.0 };
        let sectors: u64 = self.sectors.iter().sum();
        let bytes = sectors * SECTOR_BYTES;
        let per_command_share = a * w / (a * w + b * bytes as f64).max(f64::MIN_POSITIVE);
        let bound = if in_flight < LATENCY_BOUND_IN_FLIGHT {
            ServiceBound::Latency
        } else if per_command_share >= 0.5 {
            ServiceBound::Iops
        } else {
            ServiceBound::Bandwidth
        };
        Ok(ServiceFit {
            commands: self.commands,
            bytes,
            per_command_ns: a,
            ns_per_byte: b,
            in_flight,
            ceiling_bytes_per_s,
            busy_ns,
            span_ns: self.period_end - self.first_issue_ns,
            bound,
        })
    }
}

impl ServiceFit {
    /// Device time, in ns, of `commands` carrying `bytes` replayed through the model.
    pub fn time_ns(&self, commands: u64, bytes: u64) -> f64 {
        self.per_command_ns * commands as f64 + self.ns_per_byte * bytes as f64
    }

    /// The fit as the report states it.
    pub fn to_model(&self) -> ServiceModel {
        let round = |value: f64, places: i32| {
            let scale = 10f64.powi(places);
            (value * scale).round() / scale
        };
        ServiceModel {
            commands_fitted: self.commands,
            per_command_ms: round(self.per_command_ns / 1e6, 4),
            ms_per_mib: round(self.ns_per_byte * 1_048_576.0 / 1e6, 4),
            in_flight: round(self.in_flight, 2),
            ceiling_mib_per_s: round(self.ceiling_bytes_per_s / 1_048_576.0, 1),
            busy_ms: round(self.busy_ns as f64 / 1e6, 3),
            span_ms: round(self.span_ns as f64 / 1e6, 3),
            bound: self.bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lanes` commands always in flight, each lane issuing its next command
    /// when its last completes; sizes cycle through `sizes` (sectors).
    fn synthetic(
        a_ns: u64,
        ns_per_byte: f64,
        lanes: u64,
        sizes: &[u64],
        n: usize,
    ) -> ServiceSamples {
        let mut completions = Vec::new();
        let mut lane_free = vec![1_000u64; lanes as usize];
        for i in 0..n {
            let lane = i % lanes as usize;
            // One size per round, so the lanes stay level.
            let sectors = sizes[(i / lanes as usize) % sizes.len()];
            let d2c = a_ns + (ns_per_byte * (sectors * SECTOR_BYTES) as f64) as u64;
            let issue = lane_free[lane];
            lane_free[lane] = issue + d2c;
            completions.push((issue + d2c, issue, sectors));
        }
        completions.sort();
        let mut samples = ServiceSamples::default();
        for (done, issue, sectors) in completions {
            samples.complete(issue, done, sectors);
        }
        samples
    }

    fn near(value: f64, expected: f64, share: f64) -> bool {
        (value - expected).abs() <= expected.abs() * share
    }

    #[test]
    fn the_fit_recovers_a_known_cost_per_command_per_byte_and_concurrency() {
        // D2C of 420 µs a command + 2.1 ms/MiB, 4 in flight, 8 KiB to 512 KiB:
        // each command keeps the device busy a quarter of that.
        let b = 2.1e6 / 1_048_576.0;
        let samples = synthetic(420_000, b, 4, &[16, 128, 256, 1024], 4000);
        let fit = samples.fit().unwrap();
        assert!(near(fit.per_command_ns, 105_000.0, 0.03), "{fit:?}");
        assert!(near(fit.ns_per_byte, b / 4.0, 0.03), "{fit:?}");
        assert!(near(fit.in_flight, 4.0, 0.03), "{fit:?}");
        let model = fit.to_model();
        assert!(near(model.per_command_ms, 0.105, 0.03), "{model:?}");
        assert!(near(model.ms_per_mib, 0.525, 0.03), "{model:?}");
        // The model's time for the traced commands is the busy time.
        let now = fit.time_ns(fit.commands, fit.bytes);
        assert!(near(now, fit.busy_ns as f64, 0.03), "{now} vs {fit:?}");
        assert!(near(fit.span_ns as f64, fit.busy_ns as f64, 0.01));
    }

    #[test]
    fn one_at_a_time_is_latency_bound_and_per_command_cost_is_iops_bound() {
        let serial = synthetic(100_000, 0.5, 1, &[8, 64, 256], 300)
            .fit()
            .unwrap();
        assert_eq!(serial.bound, ServiceBound::Latency);
        assert!(near(serial.in_flight, 1.0, 0.01));
        let costly = synthetic(2_000_000, 0.1, 8, &[8, 64], 800).fit().unwrap();
        assert_eq!(costly.bound, ServiceBound::Iops);
        let streaming = synthetic(10_000, 20.0, 8, &[256, 2048], 800).fit().unwrap();
        assert_eq!(streaming.bound, ServiceBound::Bandwidth);
    }

    #[test]
    fn the_replay_of_fewer_larger_commands_takes_less_and_never_beats_the_ceiling() {
        let b = 2.1e6 / 1_048_576.0;
        let fit = synthetic(420_000, b, 4, &[16, 128], 1000).fit().unwrap();
        // 64 MiB as 1024 commands of 64 KiB, then as 128 of 512 KiB.
        let bytes = 64 << 20;
        let now = fit.time_ns(1024, bytes);
        let after = fit.time_ns(128, bytes);
        let expected_now = (1024.0 * 420_000.0 + b * bytes as f64) / 4.0;
        assert!(near(now, expected_now, 0.03), "{now} {expected_now}");
        assert!(after < now);
        let expected_after = (128.0 * 420_000.0 + b * bytes as f64) / 4.0;
        assert!(
            near(after, expected_after, 0.03),
            "{after} {expected_after}"
        );
        // However few commands, the bytes take bytes / ceiling.
        let floor = bytes as f64 / fit.ceiling_bytes_per_s * 1e9;
        assert!(fit.time_ns(1, bytes) >= floor - 1.0);
        assert!(near(fit.time_ns(0, bytes), floor, 0.001));
        assert!(near(fit.ceiling_bytes_per_s, 4.0 / b * 1e9, 0.03));
    }

    #[test]
    fn fragments_queued_behind_a_throttle_cost_its_rate_not_their_wait() {
        // 300 IOPS whatever the size: bursts of 32 fragments of 32 KiB
        // queued at once, then 4 KiB writes one at a time.
        let slot = 1_000_000_000 / 300;
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for _ in 0..16 {
            for k in 1..=32 {
                samples.complete(t, t + k * slot, 64);
            }
            t += 32 * slot;
        }
        for _ in 0..128 {
            samples.complete(t, t + slot, 8);
            t += slot;
        }
        let fit = samples.fit().unwrap();
        assert!(near(fit.per_command_ns, slot as f64, 0.02), "{fit:?}");
        assert!(fit.ns_per_byte < 1e-3, "{fit:?}");
        assert_eq!(fit.bound, ServiceBound::Iops);
        // The fix: each 1 MiB write as 2 commands, a quarter of the time.
        let bytes = fit.bytes;
        let now = fit.time_ns(640, bytes);
        assert!(near(now, fit.busy_ns as f64, 0.02), "{now} {fit:?}");
        assert!(near(fit.time_ns(160, bytes) / now, 0.25, 0.02));
    }

    #[test]
    fn a_size_effect_within_noise_is_no_per_byte_cost() {
        // 4 KiB adding 4.70 ms and 32 KiB 4.93 ms (a 200 IOPS throttle):
        // no per-byte cost, so 512 KiB commands are not predicted at 8.8 ms.
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for i in 0..400u64 {
            let (sectors, added) = if i % 2 == 0 {
                (8, 4_700_000)
            } else {
                (64, 4_930_000)
            };
            samples.complete(t, t + added, sectors);
            t += added;
        }
        let fit = samples.fit().unwrap();
        assert_eq!(fit.ns_per_byte, 0.0, "{fit:?}");
        assert!(near(fit.per_command_ns, 4_815_000.0, 0.001), "{fit:?}");
    }

    /// 256 writes of 4 KiB one at a time, each adding `lone_ns`, then 64
    /// writes of 1 MiB split into 32 fragments of 32 KiB queued together,
    /// each fragment adding `queued_ns` (the CI run of 2026-12-04 on 6.12).
    fn lone_small_then_queued_fragments(lone_ns: u64, queued_ns: u64) -> ServiceSamples {
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for _ in 0..256 {
            samples.complete(t, t + lone_ns, 8);
            t += lone_ns + 300_000;
        }
        for _ in 0..64 {
            for k in 1..=32 {
                samples.complete(t, t + k * queued_ns, 64);
            }
            t += 32 * queued_ns + 300_000;
        }
        samples
    }

    #[test]
    fn a_size_effect_between_depths_is_the_depths_not_the_bytes() {
        // Behind a 200 IOPS throttle: the lone 4 KiB writes look 11% cheaper.
        let fit = lone_small_then_queued_fragments(4_350_000, 4_910_000)
            .fit()
            .unwrap();
        assert_eq!(fit.ns_per_byte, 0.0, "{fit:?}");
        assert_eq!(fit.bound, ServiceBound::Iops);
        // Behind 8 MiB/s the bytes are the cost at either depth.
        let per_byte = 1e9 / (8 << 20) as f64;
        let fit = lone_small_then_queued_fragments(
            (4096.0 * per_byte) as u64,
            (32768.0 * per_byte) as u64,
        )
        .fit()
        .unwrap();
        assert!(near(fit.ns_per_byte, per_byte, 0.02), "{fit:?}");
        assert_eq!(fit.bound, ServiceBound::Bandwidth);
        // At one depth, the same 11% is a per-byte cost.
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for i in 0..400u64 {
            let (sectors, added) = if i % 2 == 0 {
                (8, 4_350_000)
            } else {
                (64, 4_910_000)
            };
            samples.complete(t, t + added, sectors);
            t += added;
        }
        assert!(samples.fit().unwrap().ns_per_byte > 0.0);
    }

    #[test]
    fn too_few_commands_or_one_size_fit_nothing() {
        let few = synthetic(100_000, 1.0, 2, &[8, 256], 31);
        assert_eq!(few.fit(), Err(TimeUnavailable::TooFewCommands));
        assert!(synthetic(100_000, 1.0, 2, &[8, 256], 32).fit().is_ok());
        let one_size = synthetic(100_000, 1.0, 2, &[128], 1000);
        assert_eq!(one_size.fit(), Err(TimeUnavailable::OneCommandSize));
        // A stray other size among a thousand does not make a line.
        let mut sizes = vec![128; 999];
        sizes.push(8);
        let stray = synthetic(100_000, 1.0, 2, &sizes, 1000);
        assert_eq!(stray.fit(), Err(TimeUnavailable::OneCommandSize));
        assert_eq!(
            ServiceSamples::default().fit(),
            Err(TimeUnavailable::TooFewCommands)
        );
    }

    #[test]
    fn idle_gaps_are_not_busy_time() {
        let mut samples = ServiceSamples::default();
        // Two bursts of 1 ms each, 1 s apart.
        for burst in 0..2u64 {
            let base = burst * 1_000_000_000;
            samples.complete(base, base + 1_000_000, 8);
            samples.complete(base + 500_000, base + 1_000_000, 8);
        }
        assert_eq!(samples.busy_ns(), 2_000_000);
        // A long command completing last reaches back only to the last
        // closed period's end (the documented undercount).
        samples.complete(1_500_000_000, 1_600_000_000, 8);
        samples.complete(1_000_000, 1_700_000_000, 8);
        assert_eq!(samples.busy_ns(), 2_000_000 + 699_000_000);
    }

    #[test]
    fn negative_slopes_and_intercepts_are_refitted() {
        // Larger commands faster than small ones: no per-byte cost.
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for i in 0..100 {
            let (sectors, d2c) = if i % 2 == 0 { (8, 2000) } else { (256, 1000) };
            samples.complete(t, t + d2c, sectors);
            t += d2c;
        }
        let fit = samples.fit().unwrap();
        assert_eq!(fit.ns_per_byte, 0.0);
        assert!(near(fit.per_command_ns, 1500.0, 0.001));
        // Cost below proportional: through the origin.
        let mut samples = ServiceSamples::default();
        let mut t = 0;
        for i in 0..100 {
            let (sectors, d2c) = if i % 2 == 0 { (8, 10) } else { (256, 1000) };
            samples.complete(t, t + d2c, sectors);
            t += d2c;
        }
        let fit = samples.fit().unwrap();
        assert_eq!(fit.per_command_ns, 0.0);
        assert!(fit.ns_per_byte > 0.0);
    }
}
