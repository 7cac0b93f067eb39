//! iosplit-trace probes: capture and filtering only.
//!
//! Two programs per block tracepoint, one per flavor, both generated from the
//! probe table (`tracer_common::with_block_probes!`); userspace loads one
//! flavor (or, for the floor measurement, `probes/noop.rs`'s programs that
//! return at once). BTF-typed tracepoints (`tp_btf`, `probes/btf.rs`)
//! load `struct bio` / `struct request` fields at BTF offsets from the
//! `KERNEL_LAYOUT` global; the
//! classic fallback (`probes/classic.rs`) copies the formatted record, with
//! format-file offsets from the `CLASSIC_FIELDS` global. Both are set at load
//! time, so the same object runs on kernels whose layouts differ. Each hit
//! that passes the device (and optional pid) filter becomes one fixed-size
//! record in this CPU's `EVENTS<n>` ring buffer; a full ring is counted,
//! never silent. `block_dirty_buffer` is counted per device in a kernel map.
//! `probes/process.rs` follows `run`'s process tree and its syscalls.
//!
//! Everything is gated on the BPF target so the workspace still checks on the host.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// Atomic counters: the BPF target's core has no `fetch_add`.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod probes;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!("tracer-ebpf builds for the BPF target only; iosplit-trace embeds it");
}
