//! What both text importers' fuzz targets do with their input: import it
//! and run the events through the engine; refusing is fine, panicking is not.

use iosplit_trace::engine::{Engine, EngineLimits};
use iosplit_trace::geometry::{DevId, DiskGeometry, PartitionGeometry};
use iosplit_trace::record::import::{import, TextFormat};

/// The corpus's loop disk: 7:0 with partitions 259:0 and 259:1.
fn geometry() -> Vec<DiskGeometry> {
    let partition = |number: u32, start: u64, size: u64| PartitionGeometry {
        name: format!("loop0p{number}"),
        dev: Some(DevId::new(259, number - 1)),
        number,
        start,
        size,
        ..Default::default()
    };
    vec![DiskGeometry {
        name: "loop0".into(),
        dev: Some(DevId::new(7, 0)),
        size_sectors: 131072,
        logical_block_size: 512,
        physical_block_size: 512,
        max_sectors_kb: 1280,
        max_segments: 128,
        request_based: true,
        partitions: vec![partition(1, 2048, 40000), partition(2, 43008, 60001)],
        ..Default::default()
    }]
}

/// Imports `data` as `format` against the corpus's geometry and replays it.
pub fn import_and_replay(data: &[u8], format: TextFormat) {
    // analyze reads the text lossily: any bytes get here as UTF-8.
    let text = String::from_utf8_lossy(data);
    let geometry = geometry();
    let Ok(imported) = import(&text, format, &geometry) else {
        return;
    };
    // Small tables: a fresh engine per input stays cheap.
    let limits = EngineLimits {
        max_in_flight: 1024,
        ..Default::default()
    };
    let mut engine = Engine::new(geometry, limits);
    for event in &imported.events {
        engine.ingest(event);
    }
    let _ = (engine.diagnoses(), engine.devices());
}
