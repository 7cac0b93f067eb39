//! iosplit-trace probes: capture and filtering only.
//!
//! One classic tracepoint program per block event. Field offsets come from
//! the tracepoint `format` files through `*_FIELDS` globals set at load time,
//! so the same object runs on kernels whose layouts differ. Each hit that
//! passes the device (and optional pid) filter becomes one fixed-size
//! `BlockEvent` in the `EVENTS` ring buffer. A full ring is counted, never silent.
#![no_std]
#![no_main]

mod probes;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
