//! Host-side stub: the real programs build from `main.rs` for the BPF target.
//! This lets `tracer` name `tracer-ebpf` as a build-dependency so cargo
//! rebuilds the object when the probes change.
#![no_std]
