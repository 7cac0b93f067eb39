//! Classic block tracepoints → `ClassicRecord`s in the shared rings.
//!
//! The fallback probes, for kernels without BTF: one program per row of
//! `with_block_probes!`, all generated below. Offsets come from the format
//! files through the one `CLASSIC_FIELDS` global. Per hit: one copy of the
//! record's bytes straight into the ring (fields are decoded in userspace),
//! plus a device read and lookup only when filtering. No loops, no string
//! work, no wakeup unless the ring holds more than `WAKEUP_BYTES` (userspace
//! drains on a short timer).

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel_buf},
    macros::tracepoint,
    programs::TracePointContext,
    EbpfContext, Global,
};
use aya_log_ebpf::debug;
use tracer_common::{
    counter, device_filter, ClassicFields, ClassicRecord, EventKind, FieldOffsets,
    CLASSIC_RECORD_START, NO_FIELD,
};

use super::shared::{
    bump, count_dirty_buffer, device_wanted, record_tgid, ring, submit, FILTER_DEVICES,
};

/// Every kind's record offsets, indexed by kind (`ABSENT` under BTF tracepoints).
#[unsafe(no_mangle)]
static CLASSIC_FIELDS: Global<ClassicFields> =
    Global::new([FieldOffsets::ABSENT; EventKind::COUNT]);

/// One kind's offsets, without copying the whole table.
#[inline(always)]
fn classic_fields(kind: EventKind) -> FieldOffsets {
    let table: *const ClassicFields = (&CLASSIC_FIELDS as *const Global<ClassicFields>).cast();
    // SAFETY: `Global` is a transparent wrapper of the initialized array, and
    // `kind` indexes it (the array has one entry per kind).
    unsafe { core::ptr::read_volatile((table as *const FieldOffsets).add(kind as usize)) }
}

/// Reads a `T` at `offset` in the tracepoint record.
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, i32> {
    // SAFETY: the offset comes from the tracepoint's own format file and the
    // read goes through bpf_probe_read_kernel, which faults safely.
    unsafe { ctx.read_at::<T>(offset as usize) }
}

/// Whether the event's device (or, for a remap, the device it came from) is in scope.
#[inline(always)]
fn in_scope(ctx: &TracePointContext, fields: &FieldOffsets) -> Result<bool, i32> {
    if device_wanted(field::<u32>(ctx, fields.dev)?) {
        return Ok(true);
    }
    if fields.aux_dev == NO_FIELD {
        return Ok(false);
    }
    let aux_dev = field::<u32>(ctx, fields.aux_dev)?;
    Ok(aux_dev != 0 && device_wanted(aux_dev))
}

#[inline(always)]
fn capture(ctx: &TracePointContext, kind: EventKind) -> u32 {
    let fields = classic_fields(kind);
    if fields.enabled == 0 {
        return 0;
    }
    if kind == EventKind::DirtyBuffer {
        return classic_dirty_buffer(ctx, &fields);
    }
    // A flush's clone carries no sectors; the blk tracer logs none either.
    if kind == EventKind::RqRemap && field::<u32>(ctx, fields.nr_sector).unwrap_or(0) == 0 {
        return 0;
    }
    if FILTER_DEVICES.load() != device_filter::ALL {
        match in_scope(ctx, &fields) {
            Ok(true) => {}
            Ok(false) => return 0,
            Err(errno) => return read_failed(ctx, kind, errno),
        }
    }
    let Some(tgid) = record_tgid(kind) else {
        return 0;
    };
    let events = ring();
    let Some(mut entry) = events.reserve::<ClassicRecord>(0) else {
        bump(counter::DROPPED);
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved, writable ClassicRecord; the record
    // bytes are copied with a helper that faults safely.
    let copied = unsafe {
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).tgid = tgid;
        // kind and its padding in one store: a 3-byte array assignment is a
        // call to a byte-loop memset.
        (&raw mut (*event).kind).cast::<u32>().write(kind as u32);
        bpf_probe_read_kernel_buf(
            (ctx.as_ptr() as *const u8).add(CLASSIC_RECORD_START),
            &mut (*event).record,
        )
    };
    if let Err(errno) = copied {
        entry.discard(0);
        return read_failed(ctx, kind, errno);
    }
    submit(events, entry);
    0
}

const _: () = assert!(
    core::mem::offset_of!(ClassicRecord, kind) % 4 == 0
        && core::mem::offset_of!(ClassicRecord, _pad)
            == core::mem::offset_of!(ClassicRecord, kind) + 1
);

/// Counts (and logs, off the hot path: it should never happen) a failed read.
#[inline(always)]
fn read_failed(ctx: &TracePointContext, kind: EventKind, errno: i32) -> u32 {
    bump(counter::READ_FAILED);
    debug!(
        ctx,
        "iosplit-trace: reading a {} record failed: {}", kind as u8, errno
    );
    0
}

/// One classic program per row of the probe table, named by it.
macro_rules! classic_programs {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident: $tracepoint:ident, $json:ident, $classic:ident, $btf:ident, $object:ident, $arguments:literal $(, $rest:literal)*;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[tracepoint]
            pub fn $classic(ctx: TracePointContext) -> u32 {
                capture(&ctx, EventKind::$kind)
            }
        )*
    };
}

tracer_common::with_block_probes!(classic_programs);

#[inline(always)]
fn classic_dirty_buffer(ctx: &TracePointContext, fields: &FieldOffsets) -> u32 {
    let (dev, bytes) = match (
        field::<u32>(ctx, fields.dev),
        field::<u64>(ctx, fields.aux_sector),
    ) {
        (Ok(dev), Ok(bytes)) => (dev, bytes),
        (Err(errno), _) | (_, Err(errno)) => {
            return read_failed(ctx, EventKind::DirtyBuffer, errno)
        }
    };
    count_dirty_buffer(dev, bytes);
    0
}
