//! Text claimed to be blkparse's default output: importing it and running the
//! events through the engine must refuse or report, never panic.
#![no_main]

#[path = "common/text_import.rs"]
mod text_import;

use iosplit_trace::record::import::TextFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| text_import::import_and_replay(data, TextFormat::Blkparse));
