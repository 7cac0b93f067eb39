//! Block tracepoints and the write-family syscalls of a traced process tree.
//!
//! Contract: for every row of `with_block_probes!` (the `block/*`
//! tracepoints), a BTF-tracepoint program producing `BtfEvent`s (offsets
//! from BTF, `btf`) and a classic one producing `ClassicRecord`s
//! (offsets from the format files, `classic`), both into the rings and
//! filters of `shared`; `sched/sched_process_fork` to
//! follow a process tree, and `syscalls/sys_{enter,exit}_*` to produce
//! `ProcessEvent`s for it (`process`); and, for the floor measurement, a
//! BTF-tracepoint program per row that returns at once (`noop`).

pub mod btf;
pub mod classic;
pub mod noop;
pub mod passthrough;
pub mod process;
pub mod shared;
pub mod tag_wait;
