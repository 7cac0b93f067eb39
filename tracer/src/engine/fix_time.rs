//! `run`'s time with a fix: how long the command would take with the fix
//! whose what-if saves the most device time. Pure modelling: the run's
//! measured time, the fixes its findings propose and what its writes covered
//! in; the estimate out. Only the part of the run the device was busy is
//! scaled; the rest stays as it was.

use crate::model::{
    Code, RunTarget, RunTimeWithFix, ServiceBound, ServiceModel, TimeBounds, TimeUnavailable,
    WhatIf,
};

/// A fix one of the run's findings proposes, and what its what-if predicts.
#[derive(Clone, Copy, Debug)]
pub struct ProposedFix<'a> {
    pub code: Code,
    /// The finding's device.
    pub device: &'a str,
    pub what_if: &'a WhatIf,
}

/// Below this share of the run busy, the device's time is not the run's.
const IO_BOUND_SHARE: f64 = 0.2;

/// Below this speedup, a run paid little for what the fix removes.
const LITTLE_SPEEDUP: f64 = 1.1;

/// The run's time with the fix whose what-if saves the most device time
/// (the last of equals, in `fixes`' order): the device-busy part of the
/// `run_s` seconds scaled by the what-if's times, the rest left as it was.
/// `targets` are the run's, for the reads a block-size fix adds. `None`
/// when no fix is proposed.
pub fn time_with_fix(
    run_s: f64,
    fixes: &[ProposedFix<'_>],
    targets: &[RunTarget],
) -> Option<RunTimeWithFix> {
    let saved = |what_if: &WhatIf| match (what_if.time_now_ms, what_if.time_after_fix_ms) {
        (Some(now), Some(after)) => now - after,
        _ => f64::NEG_INFINITY,
    };
    let fix = fixes
        .iter()
        .max_by(|left, right| saved(left.what_if).total_cmp(&saved(right.what_if)))?;
    Some(estimate_of(run_s, fix, targets))
}

/// The run's time with each proposed fix, in `fixes`' order (cheapest
/// first): every fix that applies with its own estimate.
pub fn time_with_each_fix(
    run_s: f64,
    fixes: &[ProposedFix<'_>],
    targets: &[RunTarget],
) -> Vec<RunTimeWithFix> {
    fixes
        .iter()
        .map(|fix| estimate_of(run_s, fix, targets))
        .collect()
}

/// The run's time with `fix`: the device-busy part scaled by its what-if.
fn estimate_of(run_s: f64, fix: &ProposedFix<'_>, targets: &[RunTarget]) -> RunTimeWithFix {
    let what_if = fix.what_if;
    let mut estimate = RunTimeWithFix {
        code: fix.code.to_string(),
        device: fix.device.to_string(),
        run_s,
        commands_now: what_if.commands_now,
        commands_after_fix: what_if.commands_after_fix,
        pays_little: saves_little(what_if.commands_now, what_if.commands_after_fix),
        reads_after_fix: reads_after_fix(fix, targets),
        ..RunTimeWithFix::default()
    };
    let (Some(now), Some(after), Some(model)) = (
        what_if.time_now_ms,
        what_if.time_after_fix_ms,
        what_if.service_model,
    ) else {
        estimate.device_busy_s = what_if.busy_ms.map(|ms| (ms / 1000.0).min(run_s));
        estimate.pays_little |= little_at_most(run_s, estimate.device_busy_s, what_if);
        estimate.unavailable = Some(
            what_if
                .time_unavailable
                .unwrap_or(TimeUnavailable::NoServiceTime),
        );
        // One command size: both ends, where the device's time is the run's.
        if let (Some(bounds), Some(busy_s)) =
            (what_if.time_after_fix_bounds_ms, estimate.device_busy_s)
        {
            if busy_s >= IO_BOUND_SHARE * run_s && busy_s > 0.0 {
                let scaled = |device_ms: f64| run_s - busy_s + (device_ms / 1000.0).min(busy_s);
                estimate.run_after_fix_bounds_s = Some(TimeBounds {
                    iops_bound: scaled(bounds.iops_bound),
                    bandwidth_bound: scaled(bounds.bandwidth_bound),
                });
            }
        }
        return estimate;
    };
    let busy_s = (model.busy_ms / 1000.0).min(run_s);
    estimate.device_busy_s = Some(busy_s);
    if run_s <= 0.0 || now <= 0.0 || busy_s < IO_BOUND_SHARE * run_s {
        estimate.unavailable = Some(TimeUnavailable::NotIoBound);
        return estimate;
    }
    let read_s = estimate.reads_after_fix as f64 * read_cost_ms(&model) / 1000.0;
    estimate.run_after_fix_s = Some(run_after_fix_s(run_s, busy_s, after / now, &model) + read_s);
    let after_s = estimate.run_after_fix_s.unwrap_or(run_s);
    estimate.speedup = (after_s > 0.0).then(|| run_s / after_s);
    estimate.pays_little |= estimate
        .speedup
        .is_some_and(|speedup| speedup < LITTLE_SPEEDUP);
    estimate
}

/// The run's time with the device's time scaled by `ratio`. Commands taken
/// one at a time wait on each other, so the time the device sat idle between
/// them stays. Commands kept in flight overlap the submitter (and a
/// rate-limited disk credits its pauses), so the whole span from first issue
/// to last completion scales, never below the pauses it held; what came
/// before and after the span stays.
fn run_after_fix_s(run_s: f64, busy_s: f64, ratio: f64, model: &ServiceModel) -> f64 {
    if model.bound == ServiceBound::Latency {
        return run_s - busy_s * (1.0 - ratio);
    }
    let span_s = (model.span_ms / 1000.0).clamp(busy_s, run_s);
    (run_s - span_s) + (span_s - busy_s).max(span_s * ratio)
}

/// The reads a 4 KiB block size adds to the run's writes on the device of
/// a `subpage_block_size` fix: one per page first written in part.
fn reads_after_fix(fix: &ProposedFix<'_>, targets: &[RunTarget]) -> u64 {
    if fix.code != Code::SubpageBlockSize {
        return 0;
    }
    let device = fix.device.trim_start_matches("/dev/");
    targets
        .iter()
        .filter(|target| target.device.trim_start_matches("/dev/") == device)
        .map(|target| target.partial_pages)
        .sum()
}

/// What one 4 KiB command costs the device, which a writer waiting on its
/// read pays in full.
fn read_cost_ms(model: &ServiceModel) -> f64 {
    model.per_command_ms + model.ms_per_mib * 4096.0 / 1_048_576.0
}

/// The fix leaves at least four fifths of the commands.
/// Without a time model, what the fix can save at most: the device's busy
/// time scaled by the commands it removes (a device whose time follows its
/// bytes saves less). Little when even that leaves the run almost as long.
fn little_at_most(run_s: f64, busy_s: Option<f64>, what_if: &WhatIf) -> bool {
    let (Some(busy_s), true) = (busy_s, what_if.commands_now > 0 && run_s > 0.0) else {
        return false;
    };
    let kept = (what_if.commands_after_fix as f64 / what_if.commands_now as f64).min(1.0);
    let most_saved = busy_s.min(run_s) * (1.0 - kept);
    run_s / (run_s - most_saved).max(f64::MIN_POSITIVE) < LITTLE_SPEEDUP
}

fn saves_little(now: u64, after: u64) -> bool {
    now > 0 && after.saturating_mul(5) >= now.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(now_ms: f64, after_ms: f64, busy_ms: f64) -> WhatIf {
        WhatIf {
            time_after_fix_bounds_ms: None,
            commands_now: 128,
            commands_after_fix: 16,
            time_now_ms: Some(now_ms),
            time_after_fix_ms: Some(after_ms),
            time_unavailable: None,
            service_model: Some(ServiceModel {
                commands_fitted: 128,
                per_command_ms: 0.4,
                ms_per_mib: 2.0,
                in_flight: 1.0,
                ceiling_mib_per_s: 500.0,
                busy_ms,
                span_ms: busy_ms,
                bound: ServiceBound::Latency,
            }),
            busy_ms: Some(busy_ms),
            segments: None,
        }
    }

    /// The one fix of a `split_amplification` finding on loop1.
    fn split_fix(what_if: &WhatIf) -> [ProposedFix<'_>; 1] {
        [ProposedFix {
            code: Code::SplitAmplification,
            device: "loop1",
            what_if,
        }]
    }

    /// 7.3's NVMe merges mkfs's small buffers (no virt boundary): 18
    /// commands, 14 after the fix, the device busy 0.075 s of a 0.29 s
    /// run. No time model fits so few commands, yet even removing the
    /// commands' whole share of the busy time saves under 10%: it pays little.
    #[test]
    fn without_a_model_the_most_a_fix_can_save_still_bounds_pays_little() {
        let what_if = WhatIf {
            commands_now: 18,
            commands_after_fix: 14,
            busy_ms: Some(75.0),
            time_unavailable: Some(TimeUnavailable::TooFewCommands),
            ..WhatIf::default()
        };
        let estimate = time_with_fix(0.29, &split_fix(&what_if), &[]).unwrap();
        assert!(estimate.pays_little, "{estimate:?}");
        assert_eq!(estimate.run_after_fix_s, None);
        // The same cut on a run the device kept busy throughout pays.
        let busy = WhatIf {
            busy_ms: Some(290.0),
            ..what_if
        };
        let estimate = time_with_fix(0.29, &split_fix(&busy), &[]).unwrap();
        assert!(!estimate.pays_little, "{estimate:?}");
    }

    #[test]
    fn only_the_busy_part_of_the_run_is_scaled() {
        // 10 s run, device busy 8 s; the fix takes device time 8 s -> 2 s.
        let what_if = timed(8000.0, 2000.0, 8000.0);
        let estimate = time_with_fix(10.0, &split_fix(&what_if), &[]).unwrap();
        assert_eq!(estimate.unavailable, None);
        assert_eq!(estimate.device_busy_s, Some(8.0));
        let after = estimate.run_after_fix_s.unwrap();
        assert!((after - 4.0).abs() < 1e-9, "{estimate:?}");
        assert!((estimate.speedup.unwrap() - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_subpage_fix_adds_a_read_for_each_page_first_written_in_part() {
        // mkfs.ext4 on qemu NVMe: 81 pages its 1 KiB writes covered in part
        // became 81 reads of 4 KiB on the fixed partition.
        let what_if = timed(8000.0, 2000.0, 8000.0);
        let mut fixes = split_fix(&what_if);
        let without = time_with_fix(10.0, &fixes, &[]).unwrap();
        let targets = [
            RunTarget {
                device: fixes[0].device.to_string(),
                partial_pages: 81,
                ..RunTarget::default()
            },
            RunTarget {
                device: "another".into(),
                partial_pages: 1000,
                ..RunTarget::default()
            },
        ];
        // Another fix leaves the block size as it is.
        assert_eq!(
            time_with_fix(10.0, &fixes, &targets)
                .unwrap()
                .reads_after_fix,
            0
        );
        fixes[0].code = Code::SubpageBlockSize;
        let with = time_with_fix(10.0, &fixes, &targets).unwrap();
        assert_eq!(with.reads_after_fix, 81);
        // Each costs the model's command and its 4 KiB: 0.4 + 2.0 / 256 ms.
        let added = with.run_after_fix_s.unwrap() - without.run_after_fix_s.unwrap();
        assert!((added - 81.0 * 0.4078125 / 1000.0).abs() < 1e-9, "{added}");
    }

    /// A what-if on a device that kept `in_flight` commands queued.
    fn pipelined(now_ms: f64, after_ms: f64, busy_ms: f64, span_ms: f64) -> WhatIf {
        let mut what_if = timed(now_ms, after_ms, busy_ms);
        if let Some(model) = what_if.service_model.as_mut() {
            model.in_flight = 7.6;
            model.span_ms = span_ms;
            model.bound = ServiceBound::Iops;
        }
        what_if
    }

    #[test]
    fn queued_commands_scale_the_span_with_the_pauses_inside_it() {
        // The VM's 200 IOPS split (6.1): 2,304 -> 384 commands, 11.49 s; the
        // fixed run measured 1.87 s. Scaling only the busy part keeps the
        // span's 0.32 s of pauses and predicts 2.25 s.
        let what_if = pipelined(11094.5, 1849.1, 11094.6, 11416.6);
        let estimate = time_with_fix(11.49, &split_fix(&what_if), &[]).unwrap();
        let after = estimate.run_after_fix_s.unwrap();
        assert!((after - 1.976).abs() < 0.005, "{estimate:?}");
        // A fix that saves no device time saves no run time.
        let what_if = pipelined(7873.0, 7873.0, 7835.0, 8025.9);
        let unchanged = time_with_fix(8.05, &split_fix(&what_if), &[]).unwrap();
        assert!((unchanged.run_after_fix_s.unwrap() - 8.05).abs() < 1e-9);
        // The pauses stay when the device's time drops below them (160 -> 2
        // commands, measured 0.10 s).
        let what_if = pipelined(657.3, 8.2, 657.5, 696.3);
        let paused = time_with_fix(0.75, &split_fix(&what_if), &[]).unwrap();
        assert!(
            (paused.run_after_fix_s.unwrap() - 0.0926).abs() < 0.001,
            "{paused:?}"
        );
    }

    #[test]
    fn an_idle_device_or_an_untimed_what_if_says_why() {
        let idle = timed(800.0, 200.0, 800.0);
        let estimate = time_with_fix(10.0, &split_fix(&idle), &[]).unwrap();
        assert_eq!(estimate.unavailable, Some(TimeUnavailable::NotIoBound));
        assert_eq!(estimate.run_after_fix_s, None);
        let untimed = WhatIf {
            commands_now: 20,
            commands_after_fix: 4,
            time_unavailable: Some(TimeUnavailable::TooFewCommands),
            busy_ms: Some(52.0),
            ..WhatIf::default()
        };
        let estimate = time_with_fix(10.0, &split_fix(&untimed), &[]).unwrap();
        assert_eq!(estimate.unavailable, Some(TimeUnavailable::TooFewCommands));
        // The busy time is kept without a fit: it tells where the run's time was not.
        assert_eq!(estimate.device_busy_s, Some(0.052));
        assert_eq!(time_with_fix(10.0, &[], &[]), None);
    }
}
