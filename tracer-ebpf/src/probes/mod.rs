//! Block tracepoints and the write-family syscalls of a traced process tree.
//!
//! Contract: attaches `block/{block_bio_remap, block_bio_queue, block_split,
//! block_bio_backmerge, block_bio_frontmerge, block_rq_merge, block_rq_issue,
//! block_rq_complete, block_bio_complete, block_dirty_buffer}` and produces
//! `BlockEvent`s (classic tracepoints, offsets from the format files) or
//! `ObjectEvent`s (raw tracepoints of the same names, offsets from BTF); attaches `sched/sched_process_fork` to follow a process tree,
//! and `syscalls/sys_{enter,exit}_*` to produce `ProcessEvent`s for it.

pub mod block;
pub mod process;
pub mod raw_block;
