//! The BTF-typed probes' view of kernel structs, resolved from BTF:
//! offsets the probes follow to find the device, the window of `struct bio`
//! and `struct request` they copy, and how to decode that window (including
//! the op-flag bits that make the `rwbs` string the classic tracepoints print).

use tracer_common::{
    EventKind, KernelLayout, OwnerLayout, UringOffsets, INODE_SPAN_BYTES, PAGE_SPAN_BYTES,
    WINDOW_BYTES,
};

use super::btf::{Btf, BtfError, Member};

/// Why this kernel's BTF does not give the BTF-typed probes what they need.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("{tracepoint} takes {found} arguments here, not {expected}")]
    Arity {
        tracepoint: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("struct {strukt} has no {path}")]
    MissingMember { strukt: &'static str, path: String },
    #[error("struct {strukt}.{path} is {size} bytes, expected {expected}")]
    MemberSize {
        strukt: &'static str,
        path: String,
        size: u32,
        expected: u32,
    },
    #[error(
        "the fields of struct {strukt} span {span} bytes, more than the {WINDOW_BYTES} copied"
    )]
    WindowTooWide { strukt: &'static str, span: u64 },
    #[error("struct {strukt}'s field at byte {offset} is not aligned to its {size} bytes")]
    Misaligned {
        strukt: &'static str,
        offset: u32,
        size: u32,
    },
    #[error("this kernel's BTF has no {0}")]
    MissingEnumerator(&'static str),
    #[error("{name} is bit {bit}, outside a 32-bit flag word")]
    FlagOutOfRange { name: &'static str, bit: u32 },
}

/// Where the decoded fields sit inside the copied windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowFields {
    pub bio_opf: usize,
    pub bio_status: usize,
    pub bio_sector: usize,
    pub bio_size: usize,
    pub rq_flags: usize,
    pub rq_data_len: usize,
    pub rq_sector: usize,
    /// `mq_hctx` and `tag`: which request this is while it is in flight
    /// (a tag is unique within its hardware queue). `None` where they are
    /// missing or do not fit the window; completions are then matched by sector.
    pub rq_identity: Option<(usize, usize)>,
}

/// `blk_opf_t` encoding: the op in the low bits, flags above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpBits {
    pub op_mask: u32,
    pub read: u32,
    pub write: u32,
    pub flush: u32,
    pub discard: u32,
    pub secure_erase: u32,
    pub drv_in: u32,
    pub drv_out: u32,
    pub preflush: u32,
    pub fua: u32,
    pub rahead: u32,
    pub sync: u32,
    pub meta: u32,
    /// 0 on kernels without `REQ_ATOMIC`.
    pub atomic: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectLayout {
    pub kernel: KernelLayout,
    pub fields: WindowFields,
    pub ops: OpBits,
}

/// Parameters (with the leading `void *`) each BTF tracepoint must have.
fn expected_arity(kind: EventKind) -> usize {
    kind.arguments() + 1
}

/// Resolves everything the BTF-typed probes need, or says what is missing.
pub fn resolve(btf: &Btf) -> Result<ObjectLayout, LayoutError> {
    for kind in EventKind::ALL {
        if let Some(arity) = btf.tracepoint_arity(kind.tracepoint()) {
            if arity != expected_arity(kind) {
                return Err(LayoutError::Arity {
                    tracepoint: kind.tracepoint(),
                    // Without the probe's leading `void *`.
                    found: arity.saturating_sub(1),
                    expected: expected_arity(kind) - 1,
                });
            }
        }
    }
    let member = |strukt: &'static str, path: &[&str], size: u32| -> Result<Member, LayoutError> {
        let found = btf
            .member(strukt, path)
            .ok_or_else(|| LayoutError::MissingMember {
                strukt,
                path: path.join("."),
            })?;
        if found.size != size {
            return Err(LayoutError::MemberSize {
                strukt,
                path: path.join("."),
                size: found.size,
                expected: size,
            });
        }
        Ok(found)
    };
    let bio_bdev = member("bio", &["bi_bdev"], 8)?;
    let bio_opf = member("bio", &["bi_opf"], 4)?;
    let bio_status = member("bio", &["bi_status"], 1)?;
    let bio_sector = member("bio", &["bi_iter", "bi_sector"], 8)?;
    let bio_size = member("bio", &["bi_iter", "bi_size"], 4)?;
    let bdev_dev = member("block_device", &["bd_dev"], 4)?;
    let bdev_disk = member("block_device", &["bd_disk"], 8)?;
    // Without it, partition remaps stay records of their own.
    let bdev_start_sect = member("block_device", &["bd_start_sect"], 8).ok();
    let rq_q = member("request", &["q"], 8)?;
    let rq_flags = member("request", &["cmd_flags"], 4)?;
    let rq_data_len = member("request", &["__data_len"], 4)?;
    let rq_sector = member("request", &["__sector"], 8)?;
    let q_disk = member("request_queue", &["disk"], 8)?;
    let disk_major = member("gendisk", &["major"], 4)?;
    let disk_first_minor = member("gendisk", &["first_minor"], 4)?;
    let bh_bdev = member("buffer_head", &["b_bdev"], 8)?;
    let bh_size = member("buffer_head", &["b_size"], 8)?;

    let window =
        |strukt: &'static str, fields: &[Member]| -> Result<(u32, Vec<usize>), LayoutError> {
            // The probes store each field at its place in the window with a
            // store of its size: aligned fields and an 8-aligned start keep
            // every store aligned (the window is 8-aligned in the record).
            if let Some(m) = fields.iter().find(|m| m.offset % m.size != 0) {
                return Err(LayoutError::Misaligned {
                    strukt,
                    offset: m.offset,
                    size: m.size,
                });
            }
            let start = fields.iter().map(|m| m.offset).min().unwrap_or(0) & !7;
            let end = fields.iter().map(|m| m.offset + m.size).max().unwrap_or(0);
            if (end - start) as usize > WINDOW_BYTES {
                return Err(LayoutError::WindowTooWide {
                    strukt,
                    span: u64::from(end - start),
                });
            }
            Ok((
                start,
                fields.iter().map(|m| (m.offset - start) as usize).collect(),
            ))
        };
    let (bio_window, bio) = window("bio", &[bio_opf, bio_status, bio_sector, bio_size])?;
    // The request's identity rides in the same window when it fits.
    let identity = member("request", &["mq_hctx"], 8)
        .ok()
        .zip(member("request", &["tag"], 4).ok());
    let (rq_window, rq, rq_identity, identity_members) = match identity.map(|(hctx, tag)| {
        (
            window("request", &[rq_flags, rq_data_len, rq_sector, hctx, tag]),
            hctx,
            tag,
        )
    }) {
        Some((Ok((start, offsets)), hctx, tag)) => (
            start,
            offsets.clone(),
            Some((offsets[3], offsets[4])),
            Some((hctx, tag)),
        ),
        _ => {
            let (start, offsets) = window("request", &[rq_flags, rq_data_len, rq_sector])?;
            (start, offsets, None, None)
        }
    };

    let value = |name: &'static str| -> Result<u32, LayoutError> {
        btf.enumerator(name)
            .and_then(|value| u32::try_from(value).ok())
            .ok_or(LayoutError::MissingEnumerator(name))
    };
    let flag = |name: &'static str| -> Result<u32, LayoutError> {
        let bit = value(name)?;
        1u32.checked_shl(bit)
            .ok_or(LayoutError::FlagOutOfRange { name, bit })
    };
    // __REQ_FAILFAST_DEV is defined as REQ_OP_BITS, the first flag bit.
    let op_bits = value("__REQ_FAILFAST_DEV")?;
    let ops = OpBits {
        op_mask: 1u32.checked_shl(op_bits).map(|bit| bit - 1).ok_or(
            LayoutError::FlagOutOfRange {
                name: "__REQ_FAILFAST_DEV",
                bit: op_bits,
            },
        )?,
        read: value("REQ_OP_READ")?,
        write: value("REQ_OP_WRITE")?,
        flush: value("REQ_OP_FLUSH")?,
        discard: value("REQ_OP_DISCARD")?,
        secure_erase: value("REQ_OP_SECURE_ERASE")?,
        drv_in: value("REQ_OP_DRV_IN")?,
        drv_out: value("REQ_OP_DRV_OUT")?,
        preflush: flag("__REQ_PREFLUSH")?,
        fua: flag("__REQ_FUA")?,
        rahead: flag("__REQ_RAHEAD")?,
        sync: flag("__REQ_SYNC")?,
        meta: flag("__REQ_META")?,
        atomic: flag("__REQ_ATOMIC").unwrap_or(0),
    };
    let owner = owner_layout(btf);
    let mut kernel = KernelLayout {
        bio_bdev: bio_bdev.offset,
        bdev_dev: bdev_dev.offset,
        bdev_disk: bdev_disk.offset,
        bio_window,
        rq_q: rq_q.offset,
        q_disk: q_disk.offset,
        disk_major: disk_major.offset,
        disk_first_minor: disk_first_minor.offset,
        rq_window,
        bh_bdev: bh_bdev.offset,
        bh_size: bh_size.offset,
        bdev_start_sect: bdev_start_sect.map_or(0, |member| member.offset),
        fold_remaps: u32::from(bdev_start_sect.is_some()),
        bio_size: bio_size.offset,
        bio_opf: bio_opf.offset,
        bio_status: bio_status.offset,
        bio_sector: bio_sector.offset,
        rq_flags: rq_flags.offset,
        rq_data_len: rq_data_len.offset,
        rq_sector: rq_sector.offset,
        rq_hctx: identity_members.map_or(0, |(hctx, _)| hctx.offset),
        rq_tag: identity_members.map_or(0, |(_, tag)| tag.offset),
        rq_identity: u32::from(identity_members.is_some()),
        bio_vcnt: btf
            .member("bio", &["bi_vcnt"])
            .filter(|member| member.size == 2)
            .map_or(0, |member| member.offset),
        owner,
    };
    set_spans(&mut kernel);
    Ok(ObjectLayout {
        kernel,
        fields: WindowFields {
            bio_opf: bio[0],
            bio_status: bio[1],
            bio_sector: bio[2],
            bio_size: bio[3],
            rq_flags: rq[0],
            rq_data_len: rq[1],
            rq_sector: rq[2],
            rq_identity,
        },
        ops,
    })
}

impl OpBits {
    /// The `rwbs` string the classic tracepoints print (`blk_fill_rwbs`).
    /// Built in a register: byte stores then a wide load stalled the consumer.
    pub fn rwbs(&self, opf: u32) -> [u8; tracer_common::RWBS_BYTES] {
        let mut word = 0u64;
        let mut shift = 0u32;
        let mut push = |letter: u8| {
            if shift < 64 {
                word |= u64::from(letter) << shift;
                shift += 8;
            }
        };
        if opf & self.preflush != 0 {
            push(b'F');
        }
        match opf & self.op_mask {
            op if op == self.write => push(b'W'),
            op if op == self.discard => push(b'D'),
            op if op == self.secure_erase => {
                push(b'D');
                push(b'E');
            }
            op if op == self.flush => push(b'F'),
            op if op == self.read => push(b'R'),
            _ => push(b'N'),
        }
        for (mask, letter) in [
            (self.fua, b'F'),
            (self.rahead, b'A'),
            (self.sync, b'S'),
            (self.meta, b'M'),
            (self.atomic, b'U'),
        ] {
            if mask != 0 && opf & mask != 0 {
                push(letter);
            }
        }
        word.to_le_bytes()
    }

    /// Passthrough commands carry no sector range in the tracepoints.
    pub fn is_passthrough(&self, opf: u32) -> bool {
        let op = opf & self.op_mask;
        op == self.drv_in || op == self.drv_out
    }
}

/// The owner chains this kernel's BTF allows, each enabled only when every
/// member it follows is present with a pointer's (or its value's) size. A
/// missing chain leaves that part of the owner unknown; it does not refuse
/// the BTF probes. `iomap_dio_end_io` is filled in from kallsyms by the loader.
pub fn owner_layout(btf: &Btf) -> OwnerLayout {
    let at = |strukt: &str, path: &[&str], size: u32| -> Option<u32> {
        btf.member(strukt, path)
            .filter(|member| member.size == size)
            .map(|member| member.offset)
    };
    let mut layout = OwnerLayout::ABSENT;
    layout.rq_bio = at("request", &["bio"], 8).unwrap_or(0);
    if let Some(mm) = at("task_struct", &["mm"], 8) {
        layout.task_mm = mm;
        layout.process_enabled = 1;
    }
    let cgroup = (|| {
        // `css` is an embedded struct: only its offset matters.
        let css = btf.member("blkcg", &["css"])?.offset;
        Some((
            at("bio", &["bi_blkg"], 8)?,
            at("blkcg_gq", &["blkcg"], 8)?,
            css.checked_add(at("cgroup_subsys_state", &["cgroup"], 8)?)?,
            at("cgroup", &["kn"], 8)?,
            at("kernfs_node", &["id"], 8)?,
        ))
    })();
    if let Some((blkg, blkcg, css_cgroup, kn, id)) = cgroup {
        layout.bio_blkg = blkg;
        layout.blkg_blkcg = blkcg;
        layout.blkcg_cgroup = css_cgroup;
        layout.cgroup_kn = kn;
        layout.kn_id = id;
        layout.cgroup_enabled = 1;
    }
    let inode = (|| {
        Some((
            at("inode", &["i_ino"], 8)?,
            at("inode", &["i_sb"], 8)?,
            at("super_block", &["s_dev"], 4)?,
        ))
    })();
    // 7.x renamed `compound_head` to `compound_info`; a head or order-0
    // page still has bit 0 clear there, which is all that is read of it.
    let head = at("page", &["compound_head"], 8)
        .map(|offset| (offset, 1))
        .or_else(|| at("page", &["compound_info"], 8).map(|offset| (offset, 0)));
    let page = (|| {
        Some((
            at("bio", &["bi_io_vec"], 8)?,
            at("bio", &["bi_vcnt"], 2)?,
            at("bio_vec", &["bv_page"], 8)?,
            head?,
            at("page", &["mapping"], 8)?,
            at("address_space", &["host"], 8)?,
        ))
    })();
    if let (
        Some((ino, sb, dev)),
        Some((io_vec, vcnt, bv_page, (head, head_pointer), mapping, host)),
    ) = (inode, page)
    {
        layout.inode_ino = ino;
        layout.inode_sb = sb;
        layout.sb_dev = dev;
        layout.bio_io_vec = io_vec;
        layout.bio_vcnt = vcnt;
        layout.bvec_page = bv_page;
        layout.page_compound_head = head;
        layout.page_head_pointer = head_pointer;
        layout.page_mapping = mapping;
        layout.mapping_host = host;
        layout.file_enabled = 1;
        let direct = (|| {
            Some((
                at("bio", &["bi_end_io"], 8)?,
                at("bio", &["bi_private"], 8)?,
                at("iomap_dio", &["iocb"], 8)?,
                at("kiocb", &["ki_filp"], 8)?,
                at("file", &["f_inode"], 8)?,
            ))
        })();
        if let Some((end_io, private, iocb, filp, f_inode)) = direct {
            layout.bio_end_io = end_io;
            layout.bio_private = private;
            layout.dio_iocb = iocb;
            layout.iocb_filp = filp;
            layout.file_inode = f_inode;
            // Enabled once the loader knows iomap_dio_bio_end_io's address.
        }
    }
    layout
}

/// One past the last byte of the `(in use, offset, bytes)` fields in use, at
/// most `cap`: what the probes copy from the object's start.
fn span(fields: &[(bool, u32, u32)], cap: usize) -> u32 {
    let end = fields
        .iter()
        .filter(|field| field.0)
        .map(|&(_, offset, bytes)| offset.saturating_add(bytes))
        .max()
        .unwrap_or(0);
    end.min(cap as u32)
}

/// How many bytes of a page and an inode the queue probe copies at once:
/// every field it reads from them while the file chain is on. Called again
/// after chains are turned on or off.
pub fn set_spans(kernel: &mut KernelLayout) {
    let owner = kernel.owner;
    let file = owner.file_enabled != 0;
    kernel.owner.page_span = span(
        &[
            (file, owner.page_compound_head, 8),
            (file, owner.page_mapping, 8),
        ],
        PAGE_SPAN_BYTES,
    );
    kernel.owner.inode_span = span(
        &[(file, owner.inode_ino, 8), (file, owner.inode_sb, 8)],
        INODE_SPAN_BYTES,
    );
}

/// The address of kernel function `name` in `/proc/kallsyms` text, `None`
/// when absent or hidden (all zeros under `kptr_restrict`).
pub fn kallsyms_address(kallsyms: &str, name: &str) -> Option<u64> {
    kallsyms.lines().find_map(|line| {
        let mut words = line.split_ascii_whitespace();
        let address = words.next()?;
        let kind = words.next()?;
        let symbol = words.next()?;
        (symbol == name && matches!(kind, "T" | "t"))
            .then(|| u64::from_str_radix(address, 16).ok())
            .flatten()
            .filter(|&address| address != 0)
    })
}

/// Enables the direct-I/O chain when its offsets resolved and the kernel
/// shows where `iomap_dio_bio_end_io` is.
pub fn enable_direct_io(layout: &mut OwnerLayout, kallsyms: &str) {
    if layout.file_enabled == 0 || layout.bio_end_io == 0 {
        return;
    }
    if let Some(address) = kallsyms_address(kallsyms, "iomap_dio_bio_end_io") {
        layout.iomap_dio_end_io = address;
        layout.direct_enabled = 1;
    }
}

/// Where `run`'s io_uring probe finds an SQE's fd, offset and length in
/// the request (`struct io_kiocb`) the submit tracepoint points to: the fd
/// in `cqe.fd` (set from the SQE before prep), and for the read/write ops
/// `kiocb.ki_pos`, `addr` and `len` of the `struct io_rw` that the
/// request's `cmd` holds; for FSYNC `flags` of its `struct io_sync`. All
/// from BTF, relative to the request; refused when any is missing or
/// reaches past `cmd`.
pub fn uring_request_offsets(btf: &Btf, offsets: &mut UringOffsets) -> Result<(), LayoutError> {
    let member = |strukt: &'static str, path: &[&str], size: u32| -> Result<Member, LayoutError> {
        let found = btf
            .member(strukt, path)
            .ok_or_else(|| LayoutError::MissingMember {
                strukt,
                path: path.join("."),
            })?;
        if found.size != size {
            return Err(LayoutError::MemberSize {
                strukt,
                path: path.join("."),
                size: found.size,
                expected: size,
            });
        }
        Ok(found)
    };
    let cmd = btf
        .member("io_kiocb", &["cmd"])
        .ok_or_else(|| LayoutError::MissingMember {
            strukt: "io_kiocb",
            path: "cmd".into(),
        })?;
    let in_cmd = |strukt: &'static str, inner: Member| -> Result<u16, LayoutError> {
        if inner.offset + inner.size > cmd.size {
            return Err(LayoutError::WindowTooWide {
                strukt,
                span: u64::from(inner.offset + inner.size),
            });
        }
        u16::try_from(cmd.offset + inner.offset).map_err(|_| LayoutError::WindowTooWide {
            strukt,
            span: u64::from(cmd.offset + inner.offset),
        })
    };
    let fd = member("io_kiocb", &["cqe", "fd"], 4)?;
    offsets.req_fd = u16::try_from(fd.offset).map_err(|_| LayoutError::WindowTooWide {
        strukt: "io_kiocb",
        span: u64::from(fd.offset),
    })?;
    offsets.rw_pos = in_cmd("io_rw", member("io_rw", &["kiocb", "ki_pos"], 8)?)?;
    offsets.rw_addr = in_cmd("io_rw", member("io_rw", &["addr"], 8)?)?;
    offsets.rw_len = in_cmd("io_rw", member("io_rw", &["len"], 4)?)?;
    offsets.sync_flags = in_cmd("io_sync", member("io_sync", &["flags"], 4)?)?;
    // URING_CMD's SQE: `sqe` (6.2+) points at the SQE, 6.1's `cmd` at its
    // payload. Optional: without them such SQEs are not followed.
    let pointer = member("io_uring_cmd", &["sqe"], 8)
        .map(|found| (found, tracer_common::nvme_uring::SQE_CMD))
        .or_else(|_| member("io_uring_cmd", &["cmd"], 8).map(|found| (found, 0)));
    let op = member("io_uring_cmd", &["cmd_op"], 4);
    if let (Ok((pointer, payload)), Ok(op)) = (pointer, op) {
        if let (Ok(pointer), Ok(op)) = (in_cmd("io_uring_cmd", pointer), in_cmd("io_uring_cmd", op))
        {
            (offsets.cmd_pointer, offsets.cmd_op, offsets.cmd_payload) = (pointer, op, payload);
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The 6.18 encoding: op in 8 bits, flags from bit 8.
    pub(crate) fn ops_6_18() -> OpBits {
        OpBits {
            op_mask: 0xff,
            read: 0,
            write: 1,
            flush: 2,
            discard: 3,
            secure_erase: 5,
            drv_in: 34,
            drv_out: 35,
            preflush: 1 << 18,
            fua: 1 << 17,
            rahead: 1 << 19,
            sync: 1 << 11,
            meta: 1 << 12,
            atomic: 1 << 27,
        }
    }

    /// The 6.18 windows: bio from bi_opf (16), request from cmd_flags (24).
    pub(crate) fn fields_6_18() -> WindowFields {
        WindowFields {
            bio_opf: 0,
            bio_status: 10,
            bio_sector: 16,
            bio_size: 24,
            rq_flags: 0,
            rq_data_len: 20,
            rq_sector: 24,
            rq_identity: None,
        }
    }

    /// The spans cover every field in use, from the object's start, capped.
    #[test]
    fn spans_cover_the_fields_the_probes_read() {
        // struct page / inode offsets on 6.18.
        let mut kernel = KernelLayout::ABSENT;
        let owner = &mut kernel.owner;
        owner.page_compound_head = 8;
        owner.page_mapping = 24;
        owner.inode_ino = 64;
        owner.inode_sb = 40;
        owner.file_enabled = 1;
        set_spans(&mut kernel);
        assert_eq!((kernel.owner.page_span, kernel.owner.inode_span), (32, 72));

        // Owners off (--no-owners): nothing is copied.
        kernel.owner.file_enabled = 0;
        set_spans(&mut kernel);
        assert_eq!((kernel.owner.page_span, kernel.owner.inode_span), (0, 0));

        // A field past the cap is read on its own; the span stops at the cap.
        kernel.owner.file_enabled = 1;
        kernel.owner.inode_ino = INODE_SPAN_BYTES as u32 + 64;
        set_spans(&mut kernel);
        assert_eq!(kernel.owner.inode_span, INODE_SPAN_BYTES as u32);
    }

    #[test]
    fn rwbs_is_spelled_like_blk_fill_rwbs() {
        let ops = ops_6_18();
        let text = |opf: u32| {
            let rwbs = ops.rwbs(opf);
            String::from_utf8_lossy(&rwbs)
                .trim_end_matches('\0')
                .to_string()
        };
        assert_eq!(text(1 | ops.sync), "WS");
        assert_eq!(text(ops.preflush | 1 | ops.sync), "FWS");
        assert_eq!(text(2 | ops.fua), "FF");
        assert_eq!(text(ops.rahead), "RA");
        assert_eq!(text(5), "DE");
        assert_eq!(text(9), "N");
        assert_eq!(text(1 | ops.meta | ops.atomic), "WMU");
        assert!(ops.is_passthrough(34) && ops.is_passthrough(35) && !ops.is_passthrough(1));
    }

    /// The fuzz corpus's seed, cut from Linux 6.18's BTF by fuzz/cut_btf.py,
    /// resolves to that kernel's layout: the cut keeps what the probes read.
    #[test]
    fn a_btf_cut_from_6_18_resolves_to_its_layout() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/corpus/btf/linux-6.18-block.btf"
        );
        let btf = Btf::parse(std::fs::read(path).unwrap()).unwrap();
        let layout = resolve(&btf).unwrap();
        let kernel = layout.kernel;
        assert_eq!(
            (kernel.bio_bdev, kernel.bdev_dev, kernel.bdev_disk),
            (8, 52, 16)
        );
        // The request window starts at mq_hctx (16), so it holds the tag (32) too.
        assert_eq!((kernel.bio_window, kernel.rq_window), (16, 16));
        assert_eq!((kernel.rq_q, kernel.q_disk), (0, 104));
        assert_eq!((kernel.bh_bdev, kernel.bh_size), (48, 32));
        assert_eq!(
            layout.fields,
            WindowFields {
                rq_flags: 8,
                rq_data_len: 28,
                rq_sector: 32,
                rq_identity: Some((0, 16)),
                ..fields_6_18()
            }
        );
        assert_eq!(layout.ops, ops_6_18());
        // The probes load each field at the window position userspace decodes it from.
        let fields = layout.fields;
        let (bio, rq) = (kernel.bio_window, kernel.rq_window);
        let at = |offset: u32, start: u32| (offset - start) as usize;
        assert_eq!(at(kernel.bio_opf, bio), fields.bio_opf);
        assert_eq!(at(kernel.bio_status, bio), fields.bio_status);
        assert_eq!(at(kernel.bio_sector, bio), fields.bio_sector);
        assert_eq!(at(kernel.bio_size, bio), fields.bio_size);
        assert_eq!(at(kernel.rq_flags, rq), fields.rq_flags);
        assert_eq!(at(kernel.rq_data_len, rq), fields.rq_data_len);
        assert_eq!(at(kernel.rq_sector, rq), fields.rq_sector);
        assert_eq!(kernel.rq_identity, 1);
        assert_eq!(
            Some((at(kernel.rq_hctx, rq), at(kernel.rq_tag, rq))),
            fields.rq_identity
        );
    }

    /// Regression: a prototype without even the leading `void *` once
    /// underflowed the argument count.
    #[test]
    fn a_tracepoint_prototype_without_parameters_is_refused() {
        let mut b = crate::capture::btf::tests::Builder::new();
        let proto = b.func_proto(0);
        let pointer = b.ptr(proto);
        b.typedef("btf_trace_block_rq_issue", pointer);
        let btf = Btf::parse(b.build()).unwrap();
        let err = resolve(&btf).unwrap_err();
        assert!(
            matches!(
                err,
                LayoutError::Arity {
                    tracepoint: "block_rq_issue",
                    found: 0,
                    expected: 1
                }
            ),
            "{err}"
        );
    }

    /// This machine's own kernel: every offset the probes need resolves, and
    /// the windows hold what is decoded from them.
    #[test]
    fn this_kernels_btf_resolves() {
        let btf = match Btf::from_sys_fs() {
            Ok(btf) => btf,
            Err(why) if std::env::var_os("CI").is_none() => {
                eprintln!("no kernel BTF here ({why}); the CI machine has it");
                return;
            }
            Err(why) => panic!("CI's kernel must have BTF: {why}"),
        };
        let layout = resolve(&btf).unwrap();
        let fields = layout.fields;
        for (at, size) in [
            (fields.bio_opf, 4),
            (fields.bio_status, 1),
            (fields.bio_sector, 8),
            (fields.bio_size, 4),
            (fields.rq_flags, 4),
            (fields.rq_data_len, 4),
            (fields.rq_sector, 8),
        ] {
            assert!(at + size <= WINDOW_BYTES, "{fields:?}");
        }
        assert_eq!(layout.ops.op_mask, 0xff);
        assert_eq!(layout.ops.write, 1);
        assert_ne!(layout.ops.fua, 0);
        assert_ne!(layout.kernel.bdev_disk, layout.kernel.bdev_dev);
        // Remaps fold into queue records: this kernel has bd_start_sect.
        assert_eq!(layout.kernel.fold_remaps, 1);
        // This kernel has every owner chain (cgroup, page cache, iomap direct I/O).
        let owner = layout.kernel.owner;
        assert_eq!(
            (
                owner.process_enabled,
                owner.cgroup_enabled,
                owner.file_enabled
            ),
            (1, 1, 1),
            "{owner:?}"
        );
        assert_ne!(owner.file_inode, 0);
        assert_ne!(owner.page_mapping, owner.page_compound_head);
        // 6.18 still calls it compound_head: a tail page's head is followed.
        assert_eq!(owner.page_head_pointer, 1);
        // io_uring's request: the io_rw in `cmd` (which shares the request's
        // first bytes with `file`) starts with its kiocb, ki_pos after ki_filp.
        let mut uring = UringOffsets::ABSENT;
        uring_request_offsets(&btf, &mut uring).unwrap();
        assert_eq!(uring.rw_pos, 8, "{uring:?}");
        assert_eq!(uring.rw_len, uring.rw_addr + 8, "{uring:?}");
        assert!(uring.req_fd > uring.rw_len, "cqe is past cmd: {uring:?}");
        assert_eq!(uring.sync_flags, 24, "file, len, off, then flags");
        // io_uring_cmd: file, then the SQE pointer (6.2+), and cmd_op after
        // the task-work callback.
        assert_eq!(
            (uring.cmd_pointer, uring.cmd_payload),
            (8, tracer_common::nvme_uring::SQE_CMD),
            "{uring:?}"
        );
        assert!(uring.cmd_op > uring.cmd_pointer, "{uring:?}");
    }

    #[test]
    fn kallsyms_gives_text_addresses_and_not_hidden_ones() {
        let text = "ffffffff817686a0 T __pfx_iomap_dio_bio_end_io\n\
                    ffffffff817686b0 T iomap_dio_bio_end_io\n\
                    ffffffff81aedaa0 t blkdev_bio_end_io\n";
        assert_eq!(
            kallsyms_address(text, "iomap_dio_bio_end_io"),
            Some(0xffff_ffff_8176_86b0)
        );
        assert_eq!(kallsyms_address(text, "nothing"), None);
        let hidden = "0000000000000000 T iomap_dio_bio_end_io\n";
        assert_eq!(kallsyms_address(hidden, "iomap_dio_bio_end_io"), None);
        let mut layout = OwnerLayout::ABSENT;
        enable_direct_io(&mut layout, text);
        assert_eq!(
            layout.direct_enabled, 0,
            "without the file chain, nothing to enable"
        );
    }

    /// The 6.18 BTF cut keeps only the block structs: the owner chains are
    /// off, and the rest still resolves.
    #[test]
    fn a_btf_without_owner_structs_leaves_the_owner_unknown() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/corpus/btf/linux-6.18-block.btf"
        );
        let btf = Btf::parse(std::fs::read(path).unwrap()).unwrap();
        let owner = owner_layout(&btf);
        assert_eq!(owner.cgroup_enabled, 0);
        assert_eq!(owner.direct_enabled, 0);
        // 6.18's block_device: bd_start_sect at 0, bd_disk at 16, bd_dev at 52.
        let kernel = resolve(&btf).unwrap().kernel;
        assert_eq!(
            (kernel.bdev_start_sect, kernel.bdev_disk, kernel.bdev_dev),
            (0, 16, 52)
        );
        assert_eq!(kernel.fold_remaps, 1);
    }
}
