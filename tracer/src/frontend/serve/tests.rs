use super::frame::frame;
use super::process;
use super::totals::{Served, Snapshot};
use crate::capture::KernelCounters;
use crate::frontend::prometheus;
use crate::geometry::DiskGeometry;
use crate::model::{
    Bucket, CorrelationStats, DeviceReport, Distribution, EventCounts, Measures, Op, OpMeasures,
    SplitCause,
};
use tracer_common::EventKind;

fn distribution(buckets: &[(u64, u64)]) -> Distribution {
    let count = buckets.iter().map(|(_, c)| c).sum();
    let sum: u64 = buckets.iter().map(|(low, c)| low * c).sum();
    Distribution {
        count,
        mean: if count == 0 {
            0.0
        } else {
            sum as f64 / count as f64
        },
        buckets: buckets
            .iter()
            .map(|&(low, count)| Bucket { low, count })
            .collect(),
        ..Distribution::default()
    }
}

fn snapshot(device: &str, commands: u64, sizes: &[(u64, u64)]) -> Snapshot {
    let measures = Measures {
        ops: [(
            Op::Write,
            OpMeasures {
                user_ios: commands,
                commands,
                command_size: distribution(sizes),
                split_causes: [(SplitCause::MaxSectors, commands / 2)].into(),
                ..OpMeasures::default()
            },
        )]
        .into(),
        ..Default::default()
    };
    Snapshot {
        devices: vec![DeviceReport {
            service: Default::default(),
            tag_waits: Vec::new(),
            passthrough: Vec::new(),
            name: device.to_string(),
            dev: "7:0".to_string(),
            gone: false,
            geometry: DiskGeometry::default(),
            geometry_known: true,
            measures,
            partitions: Vec::new(),
        }],
        diagnoses: Vec::new(),
        events: EventCounts::default(),
        correlation: CorrelationStats::default(),
        kernel: KernelCounters {
            dropped: commands,
            ..KernelCounters::default()
        },
        attribution: None,
    }
}

#[test]
fn owner_series_are_encoded_with_device_view_and_owner() {
    let mut served = Served::new(vec![crate::model::OwnerView::Process]);
    let owner = |commands: u64| {
        let mut entry = crate::model::OwnerEntry::new(
            crate::model::OwnerKnown::Known,
            "loop0".into(),
            crate::model::OwnerMeasures {
                user_ios: commands,
                commands,
                bytes: commands * 512,
                ..Default::default()
            },
        );
        entry.pid = Some(7);
        entry.comm = Some("dd".into());
        entry
    };
    for commands in [3, 10] {
        let mut scrape = snapshot("loop0", commands, &[]);
        scrape.attribution = Some(crate::model::Attribution {
            processes: vec![owner(commands)],
            ..Default::default()
        });
        served.absorb(&scrape);
    }
    let text = text(&served, &["loop0"]);
    let series = |owner: &str| {
        sample(
            &text,
            &format!(
                r#"iosplit_owner_commands_total{{device="loop0",by="process",owner="{owner}"}}"#
            ),
        )
    };
    // Joined at the first scrape (3 commands then are `other`'s), 7 since.
    assert_eq!(series("dd[7]"), Some(7.0), "{text}");
    assert_eq!(series("other"), Some(3.0), "{text}");
    // Gone devices take their owner series with them.
    assert!(!self::text(&served, &[]).contains("iosplit_owner_commands_total{"));
}

fn text(served: &Served, present: &[&str]) -> String {
    let present = present.iter().map(|s| s.to_string()).collect();
    prometheus::openmetrics(&frame(served, &present))
}

fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .map(|value| value.parse().unwrap())
}

const COMMANDS: &str = r#"iosplit_commands_total{device="loop0",disk="loop0",op="write"}"#;

#[test]
fn counters_never_go_down_across_engine_resets() {
    let mut served = Served::default();
    served.absorb(&snapshot("loop0", 10, &[(4096, 10)]));
    served.absorb(&snapshot("loop0", 25, &[(4096, 25)]));
    served.engine_was_reset();
    served.absorb(&snapshot("loop0", 5, &[(4096, 5)]));
    let text = text(&served, &["loop0"]);
    assert_eq!(sample(&text, COMMANDS), Some(30.0), "{text}");
    assert_eq!(
        sample(
            &text,
            r#"iosplit_splits_total{device="loop0",disk="loop0",op="write",cause="max_sectors"}"#
        ),
        Some(14.0),
        "{text}"
    );
    // The kernel's drop counter was not reset: 25 then 5 is a restart too.
    assert_eq!(sample(&text, "iosplit_events_dropped_total"), Some(30.0));
    let count = r#"iosplit_command_size_bytes_count{device="loop0",disk="loop0",op="write"}"#;
    assert_eq!(sample(&text, count), Some(30.0), "{text}");
}

#[test]
fn a_value_that_went_down_without_a_reset_counts_as_a_restart() {
    let mut served = Served::default();
    served.absorb(&snapshot("loop0", 10, &[]));
    served.absorb(&snapshot("loop0", 4, &[]));
    assert_eq!(sample(&text(&served, &["loop0"]), COMMANDS), Some(14.0));
}

#[test]
fn vanished_devices_are_not_served_but_keep_their_totals() {
    let mut served = Served::default();
    served.absorb(&snapshot("loop0", 10, &[]));
    let gone = text(&served, &[]);
    assert_eq!(sample(&gone, COMMANDS), None, "{gone}");
    assert!(gone.contains("# TYPE iosplit_commands counter"), "{gone}");
    served.absorb(&snapshot("loop0", 12, &[]));
    assert_eq!(sample(&text(&served, &["loop0"]), COMMANDS), Some(12.0));
}

#[test]
fn histogram_buckets_are_cumulative_powers_of_two() {
    let mut served = Served::default();
    // 3 values in [512, 1024), 2 in [4096, 8192), 1 in [2^30, 2^31).
    served.absorb(&snapshot("loop0", 6, &[(512, 3), (4096, 2), (1 << 30, 1)]));
    let text = text(&served, &["loop0"]);
    let bucket = |le: &str| {
        sample(
            &text,
            &format!(
                r#"iosplit_command_size_bytes_bucket{{le="{le}",device="loop0",disk="loop0",op="write"}}"#
            ),
        )
    };
    assert_eq!(bucket("511.0"), Some(0.0), "{text}");
    assert_eq!(bucket("1023.0"), Some(3.0), "{text}");
    assert_eq!(bucket("4095.0"), Some(3.0));
    assert_eq!(bucket("8191.0"), Some(5.0));
    assert_eq!(bucket("134217727.0"), Some(5.0));
    assert_eq!(bucket("+Inf"), Some(6.0));
}

#[test]
fn errors_are_counted_by_status_and_survive_an_engine_reset() {
    let failing = |errors: &[(&str, u64)]| {
        let mut scrape = snapshot("sdf", 100, &[]);
        let write = scrape.devices[0].measures.ops.get_mut(&Op::Write).unwrap();
        write.failed_commands = errors.iter().map(|(_, count)| count).sum();
        write.errors = errors
            .iter()
            .map(|(status, count)| (status.to_string(), *count))
            .collect();
        scrape
    };
    let mut served = Served::default();
    served.absorb(&snapshot("sdf", 100, &[]));
    let quiet = text(&served, &["sdf"]);
    // Described, but no series while nothing failed.
    assert!(quiet.contains("# TYPE iosplit_errors counter"), "{quiet}");
    assert!(!quiet.contains("iosplit_errors_total{"), "{quiet}");
    served.absorb(&failing(&[("EIO", 2), ("ETIMEDOUT", 1)]));
    served.engine_was_reset();
    served.absorb(&failing(&[("EIO", 3)]));
    let text = text(&served, &["sdf"]);
    let series = |status: &str| {
        sample(
            &text,
            &format!(
                r#"iosplit_errors_total{{device="sdf",disk="sdf",op="write",status="{status}"}}"#
            ),
        )
    };
    assert_eq!(series("EIO"), Some(5.0), "{text}");
    assert_eq!(series("ETIMEDOUT"), Some(1.0), "{text}");
    assert_eq!(series("ENOSPC"), None, "{text}");
    assert!(text.contains("# HELP iosplit_errors Commands that completed with an error"));
}

#[test]
fn what_if_times_are_served_in_seconds_where_the_model_applies() {
    let mut timed = crate::frontend::test_reports::requeued_diagnosis("loop0");
    timed.evidence.set_what_if(crate::model::WhatIf {
        commands_now: 593,
        commands_after_fix: 527,
        time_now_ms: Some(1500.0),
        time_after_fix_ms: Some(250.0),
        ..crate::model::WhatIf::default()
    });
    let mut scrape = snapshot("loop0", 10, &[]);
    scrape.diagnoses = vec![timed];
    let mut served = Served::default();
    served.absorb(&scrape);
    let text = text(&served, &["loop0"]);
    let seconds = |case: &str| {
        sample(
            &text,
            &format!(
                r#"iosplit_diagnosis_seconds{{code="requeued_commands",device="loop0",case="{case}"}}"#
            ),
        )
    };
    assert_eq!(seconds("now"), Some(1.5), "{text}");
    assert_eq!(seconds("after_fix"), Some(0.25), "{text}");
    // Untimed: described, no series.
    let mut untimed = snapshot("loop0", 10, &[]);
    untimed.diagnoses = vec![crate::frontend::test_reports::requeued_diagnosis("loop0")];
    served.absorb(&untimed);
    let text = self::text(&served, &["loop0"]);
    assert!(
        text.contains("# TYPE iosplit_diagnosis_seconds gauge"),
        "{text}"
    );
    assert!(!text.contains("iosplit_diagnosis_seconds{"), "{text}");
}

#[test]
fn build_info_and_every_family_are_always_described() {
    let text = text(&Served::default(), &[]);
    assert!(text.contains("iosplit_build_info{version=\""), "{text}");
    for name in [
        "iosplit_diagnosis",
        "iosplit_queue_to_complete_seconds",
        "iosplit_splits",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}: {text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn chains_in_flight_is_a_gauge_of_the_last_scrape() {
    let mut served = Served::default();
    let mut busy = snapshot("loop0", 10, &[(4096, 10)]);
    busy.correlation.in_flight = 7;
    served.absorb(&busy);
    let idle = snapshot("loop0", 12, &[(4096, 12)]);
    assert!(text(&served, &["loop0"]).contains("\niosplit_chains_in_flight 7.0\n"));
    served.absorb(&idle);
    let shown = text(&served, &["loop0"]);
    assert!(
        shown.contains("# TYPE iosplit_chains_in_flight gauge"),
        "{shown}"
    );
    assert!(
        shown.contains("\niosplit_chains_in_flight 0.0\n"),
        "{shown}"
    );
}

#[test]
fn dropped_chains_are_counted_by_reason_and_survive_an_engine_reset() {
    let mut served = Served::default();
    let mut first = snapshot("loop0", 10, &[(4096, 10)]);
    first.correlation.completion_lost = 3;
    first.correlation.aged_out = 1;
    served.absorb(&first);
    // SIGHUP resets the engine: its counters start again from 0.
    served.engine_was_reset();
    let mut second = snapshot("loop0", 2, &[(4096, 2)]);
    second.correlation.completion_lost = 2;
    served.absorb(&second);
    let shown = text(&served, &["loop0"]);
    let dropped = |reason: &str| {
        sample(
            &shown,
            &format!(r#"iosplit_chains_dropped_total{{reason="{reason}"}}"#),
        )
    };
    assert_eq!(dropped("completion_lost"), Some(5.0), "{shown}");
    assert_eq!(dropped("aged_out"), Some(1.0), "{shown}");
    assert_eq!(dropped("evicted"), Some(0.0), "{shown}");
    assert!(
        shown.contains("# TYPE iosplit_chains_dropped counter"),
        "{shown}"
    );
}

/// The exposition without the `process_*` families (they read /proc now).
fn without_process(text: &str) -> String {
    text.lines()
        .filter(|line| {
            !line.starts_with("process_")
                && !line.starts_with("# HELP process_")
                && !line.starts_with("# TYPE process_")
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn every_family_is_pinned_byte_for_byte() {
    let mut served = Served::new(vec![crate::model::OwnerView::Process]);
    served.set_audit(vec![crate::frontend::test_reports::requeued_diagnosis(
        "loop0p1",
    )]);
    for (commands, lost) in [(4, 1), (10, 3)] {
        let mut scrape = snapshot("loop0", commands, &[(512, 1), (4096, commands - 1)]);
        let device = &mut scrape.devices[0];
        let write = device.measures.ops.get_mut(&Op::Write).unwrap();
        write.issue_to_complete_us = distribution(&[(16, 1), (1000, commands - 1)]);
        write.errors = [("EIO".to_string(), commands / 4)].into();
        device.partitions.push(crate::model::PartitionReport {
            name: "loop0p1".to_string(),
            dev: "259:0".to_string(),
            geometry: Default::default(),
            geometry_known: true,
            measures: device.measures.clone(),
            gone: false,
        });
        scrape.correlation.in_flight = commands / 2;
        scrape.correlation.completion_lost = lost;
        scrape.events[EventKind::ALL[0]] = commands * 3;
        let mut timed = crate::frontend::test_reports::requeued_diagnosis("loop0");
        timed.evidence.set_what_if(crate::model::WhatIf {
            commands_now: 593,
            commands_after_fix: 527,
            time_now_ms: Some(1500.0),
            time_after_fix_ms: Some(0.1),
            ..crate::model::WhatIf::default()
        });
        scrape.diagnoses = vec![timed];
        let mut owner = crate::model::OwnerEntry::new(
            crate::model::OwnerKnown::Known,
            "loop0".into(),
            crate::model::OwnerMeasures {
                user_ios: commands,
                commands,
                bytes: commands * 512,
                ..Default::default()
            },
        );
        owner.pid = Some(7);
        owner.comm = Some("d\"d\\x".into());
        scrape.attribution = Some(crate::model::Attribution {
            processes: vec![owner],
            ..Default::default()
        });
        served.absorb(&scrape);
    }
    served.set_not_tracing("no \"probes\"\nhere".to_string());
    let shown = without_process(&text(&served, &["loop0", "loop0p1"]));
    assert_eq!(
        shown,
        PINNED_FRAME.replace("{version}", env!("CARGO_PKG_VERSION")),
        "{shown}"
    );
}

/// Every family `serve` writes, as it wrote them before the split of serve (#46).
const PINNED_FRAME: &str =
    include_str!("../../../tests/fixtures/prometheus/serve-frame.openmetrics");

#[test]
fn the_footprint_families_are_pinned_byte_for_byte() {
    let stats = process::ProcessStats {
        resident_bytes: 41 << 20,
        cpu_seconds: 2.5,
        start_time_seconds: 1_800_000_000.0,
        open_fds: 9,
    };
    let text = prometheus::openmetrics(&stats.families());
    assert_eq!(
        text,
        "\
# HELP process_resident_memory_bytes Resident memory of the exporter.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 42991616.0
# HELP process_cpu_seconds User and system CPU time of the exporter (all its threads).
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 2.5
# HELP process_start_time_seconds When the exporter started, in seconds since the Unix epoch.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1800000000.0
# HELP process_open_fds File descriptors the exporter holds open.
# TYPE process_open_fds gauge
process_open_fds 9.0
# EOF
"
    );
}

#[test]
fn the_exporters_own_footprint_is_served() {
    let text = text(&Served::default(), &[]);
    assert!(
        text.contains("# TYPE process_cpu_seconds counter"),
        "{text}"
    );
    let resident = text
        .lines()
        .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no resident memory sample: {text}"));
    assert!(resident > 1e6, "{resident}");
}
