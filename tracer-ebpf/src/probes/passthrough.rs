//! `nvme/nvme_setup_cmd`: the NVMe command of a passthrough request
//! (io_uring `URING_CMD` on `/dev/ngXnY`, as fio's `io_uring_cmd` engine
//! sends, or `nvme-cli`). The block tracepoints give such a request no
//! sector and no length; its command has both. Sent only for passthrough
//! requests, as a [`PassthroughEvent`] that names the request the way its
//! issue record will (the same window), so userspace joins the two. The
//! kernel fires this in `nvme_queue_rq`, before the request's issue and
//! on the same CPU, so both land in that CPU's ring in that order.
//!
//! A raw tracepoint: the nvme module's tracepoints are not in vmlinux's
//! BTF, so each field is a `bpf_probe_read_kernel` (the cost falls on NVMe
//! commands only, and a block command leaves after one read).

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
    Global,
};
use tracer_common::{
    counter, nvme_command, EventKind, NvmeCommand, PassthroughEvent, PassthroughOps, WINDOW_BYTES,
};

use super::btf::kernel_layout;
use super::shared::{bump, device_wanted, ring, submit};

#[unsafe(no_mangle)]
static PASSTHROUGH_OPS: Global<PassthroughOps> = Global::new(PassthroughOps::ABSENT);

#[inline(always)]
fn read<T>(address: u64) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel faults safely on a bad address.
    unsafe { bpf_probe_read_kernel(address as *const T) }.map_err(|errno| errno as i32)
}

/// `TP_PROTO(struct request *req, struct nvme_command *cmd)`.
#[raw_tracepoint(tracepoint = "nvme_setup_cmd")]
pub fn nvme_setup_cmd(ctx: RawTracePointContext) -> u32 {
    let _ = capture(ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    0
}

#[inline(always)]
fn capture(rq: u64, cmd: u64) -> Result<(), i32> {
    let ops = PASSTHROUGH_OPS.load();
    if ops.enabled == 0 {
        return Ok(());
    }
    let layout = kernel_layout();
    let op = read::<u32>(rq + u64::from(layout.rq_flags))? & ops.op_mask;
    if op != ops.drv_in && op != ops.drv_out {
        return Ok(());
    }
    let queue: u64 = read(rq + u64::from(layout.rq_q))?;
    let disk: u64 = read(queue + u64::from(layout.q_disk))?;
    if disk == 0 {
        return Ok(());
    }
    let major: u32 = read(disk + u64::from(layout.disk_major))?;
    let minor: u32 = read(disk + u64::from(layout.disk_first_minor))?;
    let dev = (major << 20) | minor;
    if !device_wanted(dev) {
        return Ok(());
    }
    let head: [u32; 2] = read(cmd + nvme_command::OPCODE)?;
    let range: [u32; 3] = read(cmd + nvme_command::CDW10)?;
    let events = ring();
    let Some(mut entry) = events.reserve::<PassthroughEvent>(0) else {
        bump(counter::DROPPED);
        return Ok(());
    };
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points at a reserved, writable PassthroughEvent; the
    // window copy faults safely (zeroes on a fault).
    unsafe {
        (*record).event.ts_ns = bpf_ktime_get_ns();
        (*record).event.arg = 0;
        (*record).event.tgid = 0;
        (*record).event.dev = dev;
        (*record).event.arg2 = 0;
        (*record).event.kind = EventKind::Issue as u8;
        (*record).event._pad = 0;
        (*record).event.segments = 0;
        let window = &mut (*record).event.window;
        if bpf_probe_read_kernel_buf((rq + u64::from(layout.rq_window)) as *const u8, window)
            .is_err()
        {
            *window = [0; WINDOW_BYTES];
        }
        (*record).command = NvmeCommand {
            opcode: head[0] as u8,
            flags: (head[0] >> 8) as u8,
            command_id: (head[0] >> 16) as u16,
            nsid: head[1],
            cdw10: range[0],
            cdw11: range[1],
            cdw12: range[2],
            _pad: 0,
        };
    }
    submit(events, entry);
    Ok(())
}
