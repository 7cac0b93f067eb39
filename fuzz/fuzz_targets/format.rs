//! A tracepoint `format` file as a hostile kernel might write it: parsing
//! and mapping it to probe offsets must refuse, never panic.
#![no_main]

use iosplit_trace::capture::format::{offsets_for, parse_fields};
use libfuzzer_sys::fuzz_target;
use tracer_common::EventKind;

fuzz_target!(|data: &[u8]| {
    // The tool reads format files with read_to_string: only UTF-8 gets here.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(fields) = parse_fields(text) else {
        return;
    };
    for kind in EventKind::ALL {
        let _ = offsets_for(kind, &fields);
    }
});
