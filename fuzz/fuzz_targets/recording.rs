//! A recording file as a damaged disk or a hostile sender might deliver it:
//! reading it and replaying it into the engine, the HTML series and the
//! Perfetto matcher must refuse or report, never panic, hang or allocate
//! without bound.
#![no_main]

use std::path::Path;

use iosplit_trace::frontend::analyze::{replay, Views};
use iosplit_trace::frontend::{html, perfetto};
use iosplit_trace::record::Recording;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(recording) = Recording::new(data) else {
        return;
    };
    let mut views = Views {
        html: Some(html::Collector::default()),
        perfetto: Some(perfetto::Matcher::new(recording.header.geometry.clone())),
    };
    let _ = replay(recording, Path::new("fuzz-input"), &mut views);
});
