//! `/sys/kernel/btf/vmlinux` as a hostile kernel might write it: parsing and
//! every lookup the BTF-typed probes depend on must refuse, never panic
//! or hang.
#![no_main]

use iosplit_trace::capture::{btf::Btf, layout};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(btf) = Btf::parse(data.to_vec()) else {
        return;
    };
    let _ = layout::resolve(&btf);
    // resolve stops at the first gap; these reach the lookups behind it.
    let _ = btf.member("bio", &["bi_iter", "bi_sector"]);
    let _ = btf.member("request", &["__sector"]);
    let _ = btf.member("gendisk", &["first_minor"]);
    let _ = btf.enumerator("__REQ_FUA");
    let _ = btf.tracepoint_arity("block_rq_complete");
});
