//! Loading the probes: checks the kernel's tracepoints, reads their field
//! offsets (format files, BTF), chooses the flavor, sizes the rings, sets the
//! object's globals and maps, loads it, and has the probes attached
//! ([`super::attach`]). Returns a [`Loaded`] for the consumer.

use std::path::Path;

use aya::{maps::HashMap, Ebpf, EbpfLoader};
use tracer_common::{
    device_filter, names, ClassicFields, EventKind, FieldOffsets, KernelLayout, PassthroughOps,
    ProcessOffsets, TagWaitFields, UringOffsets, DEVICE_LIST_LEN, NO_FIELD,
};

use crate::error::{Error, Result};
use crate::geometry::DevId;

use super::attach;
use super::decode::{self, Decoding};
use super::format::{self, ProbeStatus};
use super::layout::ObjectLayout;
use super::levers::{self, Levers, ProbeFlavor};
use super::{btf, layout, CaptureConfig, OwnerFilter, ProbeReport};

/// The probes, built by `build.rs` from `tracer-ebpf`.
static PROBES_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer"));

/// Default size of the block-event rings together: about 115k events, over
/// 50 ms at 2M events/s (drains come every 10 ms, sooner when a ring is a
/// quarter full). Each ring counts twice in RSS: the kernel maps its pages
/// twice so records can wrap around.
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;
/// Smallest default ring per CPU, however many CPUs share the total.
const DEFAULT_RING_FLOOR: u32 = 1 << 20;
/// The process-tree ring (forks, syscalls, opens: a low rate).
const PROCESS_RING_BYTES: u32 = 1 << 20;
/// Smallest ring the kernel accepts, for rings no CPU writes to.
const PAGE_BYTES: u32 = crate::blk::PAGE_BYTES as u32;
/// Bios turned away by the owner filters that are remembered at once, so
/// the requests they head are dropped too (least recently used go first).
const FILTERED_BIOS_MAX: u32 = 65536;

/// The probes loaded and attached, and what the consumer needs to read them.
pub(super) struct Loaded {
    pub(super) ebpf: Ebpf,
    /// The block probes, attached or not.
    pub(super) probes: Vec<ProbeReport>,
    /// Why the process-tree probes are missing (`run` only), if they are.
    pub(super) process_probes: Option<String>,
    /// Why io_uring submissions are not followed (`run` only), if they are not.
    pub(super) uring_probes: Option<String>,
    /// How the consumer turns the flavor's records into events.
    pub(super) decoding: Decoding,
    /// Each block-event ring's size, in bytes.
    pub(super) ring_sizes: [u32; names::RINGS],
}

/// Each ring's size: `total` shared by the rings that CPUs write to (CPU n
/// writes to ring n % RINGS), powers of two, at least `floor`; the others get
/// one page.
fn ring_sizes(total: u32, cpus: usize, floor: u32) -> [u32; names::RINGS] {
    let used = cpus.clamp(1, names::RINGS);
    let share = (total / used as u32).max(floor).max(PAGE_BYTES);
    // Round down to a power of two (the kernel's requirement).
    let share = 1u32 << (31 - share.leading_zeros());
    std::array::from_fn(|index| if index < used { share } else { PAGE_BYTES })
}

/// `FILTER_DEVICES` and `DEVICE_LIST` for `devices` (the `DEVICES` map is
/// filled either way): a short list is compared in the probe.
fn device_scope(devices: &[DevId]) -> (u8, [u32; DEVICE_LIST_LEN]) {
    let mut list = [0; DEVICE_LIST_LEN];
    if devices.is_empty() {
        return (device_filter::ALL, list);
    }
    let kernel: Vec<u32> = devices.iter().map(|dev| dev.to_kernel()).collect();
    // 0 ends the list, so a device numbered 0 (none is) goes to the map.
    if kernel.len() > DEVICE_LIST_LEN || kernel.contains(&0) {
        return (device_filter::MAP, list);
    }
    list[..kernel.len()].copy_from_slice(&kernel);
    (device_filter::LIST, list)
}

/// Loads the probes for `config` and attaches them.
pub(super) fn load(config: &CaptureConfig, events_dir: &Path) -> Result<Loaded> {
    if PROBES_OBJECT.is_empty() {
        return Err(Error::failure(
            "this binary was built without its eBPF probes (AYA_BUILD_SKIP): rebuild with `cargo xtask run`",
        ));
    }
    if !events_dir.join("block").is_dir() {
        return Err(Error::failure(
            "this kernel has no block tracepoints (needs CONFIG_TRACEPOINTS and the block layer's events)",
        ));
    }
    let offsets: Vec<(EventKind, std::result::Result<FieldOffsets, ProbeStatus>)> = EventKind::ALL
        .iter()
        .map(|&kind| (kind, format::read_offsets(events_dir, kind)))
        .collect();
    let resolved: ClassicFields = EventKind::ALL.map(|kind| {
        offsets[kind as usize]
            .1
            .clone()
            .unwrap_or(FieldOffsets::ABSENT)
    });
    let (flavor, object_layout) = levers::choose_flavor(config.accept_noop, config.read_owners)?;
    let filter_owners = config.owners.bits();
    if filter_owners != 0 {
        let owner = object_layout.map_or(tracer_common::OwnerLayout::ABSENT, |l| l.kernel.owner);
        let cgroups = config.owners.cgroups.is_empty() || owner.cgroup_enabled != 0;
        if owner.rq_bio == 0 || !cgroups {
            return Err(Error::usage(
                "-p/--pid, --cgroup and --comm filter in the kernel with the BTF-typed probes, which this kernel's BTF does not support here; trace without them and read the attribution sections instead",
            ));
        }
    }
    let decoding = match (flavor, object_layout) {
        (ProbeFlavor::Noop, _) => Decoding::Nothing,
        (_, Some(object_layout)) => {
            Decoding::Btf(decode::BtfDecoder::new(object_layout), Box::default())
        }
        (_, None) => Decoding::Classic(decode::ClassicDecoder::new(resolved)),
    };
    let (filter_devices, device_list) = device_scope(&config.devices);
    let filter_pids: u8 = u8::from(config.pids.is_some());
    let (ring_bytes, floor) = match (config.ring_bytes, levers::ring_bytes_from_env()?) {
        (0, None) => (DEFAULT_RING_BYTES, DEFAULT_RING_FLOOR),
        // Asked for explicitly (tests force overflows this way): as small as a page.
        (0, Some(bytes)) | (bytes, _) => (bytes, PAGE_BYTES),
    };
    let ring_sizes = ring_sizes(
        ring_bytes,
        aya::util::nr_cpus().unwrap_or(names::RINGS),
        floor,
    );
    // Wakeups stay on however big the rings: without them, the bursts of
    // buffered writeback (fsync) overflowed 4 MiB rings between 10 ms drains
    // (docs/benchmarks.md, "no fill-level query").
    let wakeup_bytes: u64 = u64::from(ring_sizes[0]) / 4;
    let levers = Levers::from_env()?;
    let smallest_ring = ring_sizes.iter().copied().min().unwrap_or(PAGE_BYTES);
    let wake_check_bytes = levers.wake_check_bytes(smallest_ring);
    let tgid_every_event = u8::from(levers.tgid_every_event());
    let process_offsets = if config.process_tree {
        format::read_process_offsets(events_dir).map_err(|err| crate::error::one_line(&err))
    } else {
        Err("not requested".to_string())
    };
    let process_fields = process_offsets.clone().unwrap_or(ProcessOffsets::ABSENT);
    let uring = match (config.process_tree, &process_offsets) {
        (true, Ok(_)) => uring_offsets(events_dir),
        _ => Err(UringUnavailable::NotRequested),
    };
    let uring_fields = uring
        .as_ref()
        .map_or(UringOffsets::ABSENT, |(fields, _)| *fields);

    let pause_write_opens: u32 = if config.process_tree && config.pause_write_opens {
        std::process::id()
    } else {
        0
    };
    // Tag waits (7.2+) are counted under either flavor, from their format.
    let tag_wait = match format::read_tag_wait_offsets(events_dir) {
        None => None,
        Some(Ok(fields)) => Some(fields),
        Some(Err(err)) => {
            crate::status::status(format_args!(
                "warning: block_rq_tag_wait: {}; tag waits are not counted",
                crate::error::one_line(&err)
            ));
            None
        }
    };
    let tag_wait_fields = tag_wait.unwrap_or(TagWaitFields::ABSENT);
    let mut loader = EbpfLoader::new();
    loader.override_global(names::TAG_WAIT_FIELDS, &tag_wait_fields, true);
    // Only one flavor runs: the classic programs stay inert under btf.
    let classic_fields: ClassicFields = match flavor {
        ProbeFlavor::Classic => resolved,
        ProbeFlavor::Btf | ProbeFlavor::Noop => [FieldOffsets::ABSENT; EventKind::COUNT],
    };
    loader.override_global(names::CLASSIC_FIELDS, &classic_fields, true);
    let kernel_layout = object_layout.map_or(KernelLayout::ABSENT, |layout| layout.kernel);
    loader.override_global(names::KERNEL_LAYOUT, &kernel_layout, true);
    // Passthrough ranges need the BTF probes' request names to join with.
    let passthrough = passthrough_ops(flavor, object_layout.as_ref(), events_dir);
    loader.override_global(names::PASSTHROUGH_OPS, &passthrough, true);
    loader
        .override_global(names::FILTER_DEVICES, &filter_devices, true)
        .override_global(names::DEVICE_LIST, &device_list, true)
        .override_global(names::FILTER_PIDS, &filter_pids, true)
        .override_global(names::FILTER_OWNERS, &filter_owners, true)
        // The LRU map preallocates: without owner filters it is never used.
        .map_max_entries(
            names::FILTERED_BIOS,
            if filter_owners == 0 {
                1
            } else {
                FILTERED_BIOS_MAX
            },
        )
        .override_global(names::WAKEUP_BYTES, &wakeup_bytes, true)
        .override_global(names::WAKE_CHECK_BYTES, &wake_check_bytes, true)
        .override_global(names::TGID_EVERY_EVENT, &tgid_every_event, true)
        .override_global(names::PAUSE_WRITE_OPENS, &pause_write_opens, true)
        .override_global(names::PROCESS_FIELDS, &process_fields, true)
        .override_global(names::URING_FIELDS, &uring_fields, true)
        .map_max_entries(names::PROCESS_EVENTS, PROCESS_RING_BYTES);
    for (name, bytes) in names::EVENT_RINGS.iter().zip(ring_sizes) {
        loader.map_max_entries(name, bytes);
    }
    let mut ebpf = loader.load(PROBES_OBJECT).map_err(|err| {
        Error::failure(format!(
            "the kernel refused the probes ({err}); it needs CONFIG_BPF_SYSCALL and BPF ring buffers (Linux 5.8+)"
        ))
    })?;

    fill_scope(&mut ebpf, config)?;

    let probes = attach::attach_block_probes(&mut ebpf, flavor, offsets)?;
    if tag_wait.is_some() && flavor != ProbeFlavor::Noop {
        if let Err(err) = attach::attach_tag_wait(&mut ebpf) {
            crate::status::status(format_args!("warning: {err}; tag waits are not counted"));
        }
    }
    if passthrough.enabled != 0 {
        if let Err(err) = attach::attach_passthrough(&mut ebpf) {
            crate::status::status(format_args!(
                "warning: {err}; NVMe passthrough commands are counted without their ranges"
            ));
        }
    }
    let (process_probes, uring_probes) =
        attach_run_probes(&mut ebpf, config, process_offsets, uring);
    Ok(Loaded {
        ebpf,
        probes,
        process_probes,
        uring_probes,
        decoding,
        ring_sizes,
    })
}

/// What the passthrough probe keeps: on with the BTF probes where the nvme
/// module's `nvme_setup_cmd` exists (its format file is how tracefs says so).
fn passthrough_ops(
    flavor: ProbeFlavor,
    layout: Option<&ObjectLayout>,
    events_dir: &Path,
) -> PassthroughOps {
    match layout {
        Some(layout)
            if flavor == ProbeFlavor::Btf
                && events_dir.join("nvme/nvme_setup_cmd/format").exists() =>
        {
            PassthroughOps {
                op_mask: layout.ops.op_mask,
                drv_in: layout.ops.drv_in,
                drv_out: layout.ops.drv_out,
                enabled: 1,
            }
        }
        _ => PassthroughOps::ABSENT,
    }
}

/// `run`'s process-tree and io_uring probes: why each is missing, if it is
/// (`None` for both when not asked for).
fn attach_run_probes(
    ebpf: &mut Ebpf,
    config: &CaptureConfig,
    process_offsets: std::result::Result<ProcessOffsets, String>,
    uring: std::result::Result<(UringOffsets, &'static str), UringUnavailable>,
) -> (Option<String>, Option<String>) {
    let process_probes = match (config.process_tree, process_offsets) {
        (false, _) => None,
        (true, Err(why)) => Some(why),
        (true, Ok(_)) => attach::attach_process_probes(ebpf)
            .err()
            .map(|err| err.to_string()),
    };
    if let Some(why) = &process_probes {
        if config.process_tree {
            crate::status::status(format_args!(
                "warning: cannot follow the command's syscalls ({why}); block I/O is still traced"
            ));
        }
    }
    let uring_probes = match (config.process_tree, &process_probes, uring) {
        (false, _, _) => None,
        (true, Some(why), _) => Some(why.clone()),
        (true, None, Err(why)) => Some(why.to_string()),
        (true, None, Ok((fields, tracepoint))) => attach::attach_uring_probes(
            ebpf,
            tracepoint,
            fields.async_opcode != NO_FIELD,
            fields.register_ctx != NO_FIELD,
        )
        .err()
        .map(|err| err.to_string()),
    };
    (process_probes, uring_probes)
}

/// The devices and pids in scope, into their kernel maps.
fn fill_scope(ebpf: &mut Ebpf, config: &CaptureConfig) -> Result<()> {
    let map_error =
        |err: &dyn std::fmt::Display| Error::failure(format!("cannot set the trace scope: {err}"));
    let map = ebpf
        .map_mut(names::DEVICES)
        .ok_or_else(|| map_error(&"DEVICES map missing"))?;
    let mut devices: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for dev in &config.devices {
        devices
            .insert(dev.to_kernel(), 1, 0)
            .map_err(|e| map_error(&e))?;
    }
    fill_owner_filter(ebpf, &config.owners)?;
    if let Some(pids) = &config.pids {
        let map = ebpf
            .map_mut(names::PIDS)
            .ok_or_else(|| map_error(&"PIDS map missing"))?;
        let mut table: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
        for pid in pids {
            table.insert(pid, 1, 0).map_err(|e| map_error(&e))?;
        }
    }
    Ok(())
}

/// The owner filters' values, into their kernel maps.
fn fill_owner_filter(ebpf: &mut Ebpf, owners: &OwnerFilter) -> Result<()> {
    let map_error = |what: &dyn std::fmt::Display| {
        Error::failure(format!("cannot set the owner filter: {what}"))
    };
    let missing = |name: &str| map_error(&format!("{name} map missing"));
    let map = ebpf
        .map_mut(names::OWNER_PIDS)
        .ok_or_else(|| missing(names::OWNER_PIDS))?;
    let mut pids: HashMap<_, u32, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for pid in &owners.pids {
        pids.insert(pid, 1, 0).map_err(|e| map_error(&e))?;
    }
    let map = ebpf
        .map_mut(names::OWNER_CGROUPS)
        .ok_or_else(|| missing(names::OWNER_CGROUPS))?;
    let mut cgroups: HashMap<_, u64, u8> = HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for id in &owners.cgroups {
        cgroups.insert(id, 1, 0).map_err(|e| map_error(&e))?;
    }
    let map = ebpf
        .map_mut(names::OWNER_COMMS)
        .ok_or_else(|| missing(names::OWNER_COMMS))?;
    let mut comms: HashMap<_, [u8; tracer_common::COMM_BYTES], u8> =
        HashMap::try_from(map).map_err(|e| map_error(&e))?;
    for comm in &owners.comms {
        comms.insert(comm, 1, 0).map_err(|e| map_error(&e))?;
    }
    Ok(())
}

/// Why io_uring submissions cannot be followed here.
#[derive(Debug, thiserror::Error)]
enum UringUnavailable {
    #[error("not requested")]
    NotRequested,
    #[error("{}", crate::error::one_line(.0))]
    Format(#[from] format::FormatError),
    #[error("the kernel's BTF: {0}")]
    Btf(#[from] btf::BtfError),
    #[error("the kernel's BTF: {}", crate::error::one_line(.0))]
    Layout(#[from] layout::LayoutError),
}

/// The io_uring fields `run` reads: the submit record's from its format
/// file, the request's from BTF; or why io_uring cannot be followed here.
fn uring_offsets(
    events_dir: &Path,
) -> std::result::Result<(UringOffsets, &'static str), UringUnavailable> {
    let (mut fields, tracepoint) = format::read_uring_offsets(events_dir)?;
    let btf = btf::Btf::from_sys_fs()?;
    layout::uring_request_offsets(&btf, &mut fields)?;
    fields.enabled = 1;
    Ok((fields, tracepoint))
}

#[cfg(test)]
mod tests {
    use super::{device_scope, ring_sizes, DEFAULT_RING_FLOOR, PAGE_BYTES, PROBES_OBJECT};
    use crate::geometry::DevId;
    use tracer_common::{
        device_filter, names, ClassicFields, EventKind, KernelLayout, PassthroughOps,
        ProcessEventKind, ProcessOffsets, TagWaitFields, UringOffsets, DEVICE_LIST_LEN,
    };

    /// Global symbols of a little-endian ELF64 object and their sizes.
    fn elf_symbols(elf: &[u8]) -> Vec<(String, u64)> {
        let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
        let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
        let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
        assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 object");
        let (sections, entry, count) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c));
        let header = |index: usize| sections + index * entry;
        let mut symbols = Vec::new();
        for index in 0..count {
            let section = header(index);
            if u32_at(section + 4) != 2 {
                continue; // not SHT_SYMTAB
            }
            let (table, size) = (
                u64_at(section + 0x18) as usize,
                u64_at(section + 0x20) as usize,
            );
            let strings = u64_at(header(u32_at(section + 0x28)) + 0x18) as usize;
            for symbol in (table..table + size).step_by(24) {
                if elf[symbol + 4] >> 4 == 0 {
                    continue; // STB_LOCAL
                }
                let name = &elf[strings + u32_at(symbol)..];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
                symbols.push((
                    String::from_utf8_lossy(name).into_owned(),
                    u64_at(symbol + 16),
                ));
            }
        }
        symbols
    }

    /// Userspace finds programs, maps and globals by name: every name it
    /// uses must be in the object, and every global the size it writes.
    #[test]
    fn every_name_userspace_looks_up_is_in_the_probes_object() {
        assert!(
            !PROBES_OBJECT.is_empty(),
            "built with AYA_BUILD_SKIP: this test needs the real probes object"
        );
        let symbols = elf_symbols(PROBES_OBJECT);
        let size_of = |name: &str| {
            symbols
                .iter()
                .find(|(symbol, _)| symbol == name)
                .map(|&(_, size)| size)
                .unwrap_or_else(|| panic!("`{name}` is not in the probes object"))
        };
        for kind in EventKind::ALL {
            size_of(kind.program());
            size_of(kind.btf_program());
        }
        for kind in ProcessEventKind::ALL {
            size_of(kind.enter_program());
        }
        size_of("exit_write_family");
        size_of("exit_io_submit");
        size_of("uring_submit_req");
        size_of("uring_queue_async_work");
        size_of("uring_register");
        size_of("enter_io_uring_register");
        size_of(names::TAG_WAIT_PROGRAM);
        size_of(names::PASSTHROUGH_PROGRAM);
        for ring in names::EVENT_RINGS {
            size_of(ring);
        }
        for map in [
            names::PROCESS_EVENTS,
            names::DIRTY_BUFFERS,
            names::TAG_WAITS,
            names::COUNTERS,
            names::DEVICES,
            names::PIDS,
            names::OWNER_PIDS,
            names::OWNER_CGROUPS,
            names::OWNER_COMMS,
            names::FILTERED_BIOS,
        ] {
            size_of(map);
        }
        let globals = [
            (names::CLASSIC_FIELDS, std::mem::size_of::<ClassicFields>()),
            (names::KERNEL_LAYOUT, std::mem::size_of::<KernelLayout>()),
            (names::PROCESS_FIELDS, std::mem::size_of::<ProcessOffsets>()),
            (names::URING_FIELDS, std::mem::size_of::<UringOffsets>()),
            (names::TAG_WAIT_FIELDS, std::mem::size_of::<TagWaitFields>()),
            (
                names::PASSTHROUGH_OPS,
                std::mem::size_of::<PassthroughOps>(),
            ),
            (names::FILTER_OWNERS, std::mem::size_of::<u32>()),
            (names::FILTER_DEVICES, 1),
            (names::DEVICE_LIST, 4 * DEVICE_LIST_LEN),
            (names::FILTER_PIDS, 1),
            (names::WAKEUP_BYTES, 8),
            (names::WAKE_CHECK_BYTES, 8),
            (names::TGID_EVERY_EVENT, 1),
            (names::PAUSE_WRITE_OPENS, 4),
        ];
        for (global, size) in globals {
            assert_eq!(size_of(global), size as u64, "size of {global}");
        }
    }

    #[test]
    fn a_few_devices_are_listed_and_many_go_to_the_map() {
        assert_eq!(
            device_scope(&[]),
            (device_filter::ALL, [0; DEVICE_LIST_LEN])
        );
        let two = [DevId::new(7, 0), DevId::new(259, 1)];
        let (filter, list) = device_scope(&two);
        assert_eq!(filter, device_filter::LIST);
        assert_eq!(&list[..3], &[(7 << 20), (259 << 20) | 1, 0]);
        let many: Vec<DevId> = (0..=DEVICE_LIST_LEN as u32)
            .map(|n| DevId::new(7, n))
            .collect();
        assert_eq!(device_scope(&many).0, device_filter::MAP);
        assert_eq!(
            device_scope(&many[..DEVICE_LIST_LEN]).0,
            device_filter::LIST
        );
        // Device 0:0 would end the list early.
        assert_eq!(device_scope(&[DevId::new(0, 0)]).0, device_filter::MAP);
    }

    #[test]
    fn the_rings_share_the_total_among_the_cpus_that_write_them() {
        let floor = DEFAULT_RING_FLOOR;
        assert_eq!(
            ring_sizes(16 << 20, 2, floor)[..3],
            [8 << 20, 8 << 20, PAGE_BYTES]
        );
        assert_eq!(ring_sizes(16 << 20, 1, floor)[0], 16 << 20);
        // Three CPUs: powers of two only, so 4 MiB each.
        assert_eq!(
            ring_sizes(16 << 20, 3, floor)[..4],
            [4 << 20, 4 << 20, 4 << 20, PAGE_BYTES]
        );
        // 64 CPUs share 8 rings; never below 1 MiB.
        assert!(ring_sizes(4 << 20, 64, floor)
            .iter()
            .all(|&bytes| bytes == 1 << 20));
    }

    #[test]
    fn a_small_ring_setting_goes_down_to_a_page_per_ring() {
        assert_eq!(
            ring_sizes(8 << 10, 2, PAGE_BYTES)[..3],
            [PAGE_BYTES, PAGE_BYTES, PAGE_BYTES]
        );
        // 6 KiB over two CPUs: 3 KiB each, rounded up to the kernel's page.
        assert_eq!(ring_sizes(6 << 10, 2, PAGE_BYTES)[0], PAGE_BYTES);
        assert_eq!(ring_sizes(64 << 10, 2, PAGE_BYTES)[0], 32 << 10);
    }
}
