//! `block/block_rq_tag_wait` (Linux 7.2+): a submitter found no free tag on
//! a hardware queue and waited. Counted per device, hardware queue and tag
//! set in `TAG_WAITS`, never streamed: no request exists yet to follow, and
//! a full queue makes many. Offsets come from the format file through
//! `TAG_WAIT_FIELDS`; the program is attached only where the tracepoint is.

use aya_ebpf::{
    macros::{map, tracepoint},
    maps::PerCpuHashMap,
    programs::TracePointContext,
    Global,
};
use tracer_common::{TagWaitFields, TagWaitKey, TagWaits, NO_FIELD};

use super::shared::device_wanted;

#[unsafe(no_mangle)]
static TAG_WAIT_FIELDS: Global<TagWaitFields> = Global::new(TagWaitFields::ABSENT);

#[map(name = "TAG_WAITS")]
static TAG_WAITS: PerCpuHashMap<TagWaitKey, TagWaits> = PerCpuHashMap::with_max_entries(1024, 0);

#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, i32> {
    if offset == NO_FIELD {
        return Err(0);
    }
    // SAFETY: the offset comes from the tracepoint's own format file and the
    // read goes through bpf_probe_read_kernel, which faults safely.
    unsafe { ctx.read_at::<T>(offset as usize) }
}

#[tracepoint]
pub fn tag_wait(ctx: TracePointContext) -> u32 {
    let _ = count(&ctx);
    0
}

#[inline(always)]
fn count(ctx: &TracePointContext) -> Result<(), i32> {
    let fields = TAG_WAIT_FIELDS.load();
    let dev: u32 = field(ctx, fields.dev)?;
    if !device_wanted(dev) {
        return Ok(());
    }
    let key = TagWaitKey {
        dev,
        hctx: field::<u32>(ctx, fields.hctx_id)?,
        sched: u32::from(field::<u8>(ctx, fields.is_sched_tag)? != 0),
        _pad: 0,
    };
    let nr_tags = u64::from(field::<u32>(ctx, fields.nr_tags).unwrap_or(0));
    match TAG_WAITS.get_ptr_mut(&key) {
        Some(waits) => {
            // SAFETY: a per-CPU value only this CPU writes while the program runs.
            unsafe {
                (*waits).waits += 1;
                (*waits).nr_tags = nr_tags;
            }
        }
        None => {
            let waits = TagWaits { waits: 1, nr_tags };
            let _ = TAG_WAITS.insert(&key, &waits, 0);
        }
    }
    Ok(())
}
