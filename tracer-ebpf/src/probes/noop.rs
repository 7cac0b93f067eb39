//! The floor (`IOSPLIT_PROBES=noop`): one BTF-typed raw-tracepoint program
//! per row of `with_block_probes!` that returns at once. Attached exactly like the raw
//! flavor, they measure what the tracepoints' dispatch alone costs, which no
//! tracepoint-based tracer can avoid; they capture nothing.
//!
//! Each program is named `noop_` + the row's raw program (the symbol userspace
//! looks up); a module per row keeps the Rust names apart.

/// Per row: a BTF-typed raw-tracepoint entry point (as `#[btf_tracepoint]`
/// emits it) with an empty body.
macro_rules! noop_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $raw:ident, $object:ident, $arguments:literal;
    )*) => {
        $(
            pub mod $raw {
                $(#[doc = $doc])*
                #[unsafe(export_name = concat!("noop_", stringify!($raw)))]
                #[unsafe(link_section = "tp_btf")]
                pub fn program(_ctx: *mut ::core::ffi::c_void) -> u32 {
                    0
                }
            }
        )*
    };
}

tracer_common::with_block_probes!(noop_programs);
