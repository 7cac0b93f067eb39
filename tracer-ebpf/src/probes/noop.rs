//! The floor (`IOSPLIT_PROBES=noop`): one BTF-typed (`tp_btf`) program
//! per row of `with_block_probes!` that returns at once. Attached exactly like the BTF
//! flavor, they measure what the tracepoints' dispatch alone costs, which no
//! tracepoint-based tracer can avoid; they capture nothing.
//!
//! Each program is named `noop_` + the row's BTF program (the symbol userspace
//! looks up); a module per row keeps the Rust names apart.

/// Per row: a BTF-typed (`tp_btf`) entry point (as `#[btf_tracepoint]`
/// emits it) with an empty body.
macro_rules! noop_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $btf:ident, $object:ident, $arguments:literal;
    )*) => {
        $(
            pub mod $btf {
                $(#[doc = $doc])*
                #[unsafe(export_name = concat!("noop_", stringify!($btf)))]
                #[unsafe(link_section = "tp_btf")]
                pub fn program(_ctx: *mut ::core::ffi::c_void) -> u32 {
                    0
                }
            }
        )*
    };
}

tracer_common::with_block_probes!(noop_programs);
