#!/usr/bin/env python3
"""Cuts a small valid BTF blob out of a kernel's BTF: the structs, enums and
tracepoint prototypes layout::resolve reads, with every other struct kept
only as its size and every pointer turned to void. The result seeds the
`btf` fuzz target and is a unit-test fixture.

    fuzz/cut_btf.py /sys/kernel/btf/vmlinux fuzz/corpus/btf/linux-6.18-block.btf
"""
import struct
import sys

STRUCTS = {b"bio", b"bvec_iter", b"block_device", b"request", b"request_queue",
           b"gendisk", b"buffer_head"}
ENUM_PREFIXES = (b"REQ_OP_", b"__REQ_")
TYPEDEF_PREFIX = b"btf_trace_block_"

INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, \
    FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(1, 20)


def extra_len(kind, vlen):
    if kind in (INT, VAR, DECL_TAG):
        return 4
    if kind == ARRAY:
        return 12
    if kind in (STRUCT, UNION, DATASEC, ENUM64):
        return 12 * vlen
    if kind in (ENUM, FUNC_PROTO):
        return 8 * vlen
    return 0


def main(src, dst):
    data = open(src, "rb").read()
    magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
        struct.unpack_from("<HBBIIIII", data, 0)
    assert magic == 0xEB9F, "not little-endian BTF"
    strings = data[hdr_len + str_off:hdr_len + str_off + str_len]

    def name(off):
        return strings[off:strings.index(b"\0", off)]

    # types[id] = [name_off, kind, vlen, kind_flag, size_or_type, extra words]
    types = [None]
    at, end = hdr_len + type_off, hdr_len + type_off + type_len
    while at < end:
        name_off, info, size = struct.unpack_from("<III", data, at)
        kind, vlen, flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        words = list(struct.unpack_from("<%dI" % (extra_len(kind, vlen) // 4), data, at + 12))
        types.append([name_off, kind, vlen, flag, size, words])
        at += 12 + extra_len(kind, vlen)

    keep = {}  # id -> rewritten record

    def visit(tid, full=False):
        """Keeps type tid; `full` keeps a struct's members."""
        if tid == 0 or tid in keep:
            return
        name_off, kind, vlen, flag, size, words = types[tid]
        nm = name(name_off)
        if kind in (STRUCT, UNION):
            if full or nm in STRUCTS or nm == b"":
                keep[tid] = [name_off, kind, vlen, flag, size, words]
                for i in range(vlen):
                    member = words[3 * i + 1]
                    anonymous = name(words[3 * i]) == b""
                    visit(member, full=anonymous)
            else:
                keep[tid] = [name_off, kind, 0, 0, size, []]
        elif kind in (ENUM, ENUM64):
            stride = 2 if kind == ENUM else 3
            wanted = any(name(words[stride * i]).startswith(ENUM_PREFIXES) for i in range(vlen))
            keep[tid] = [name_off, kind, vlen if wanted else 0, flag, size,
                         words if wanted else []]
        elif kind == PTR:
            target = types[size][1] if size else 0
            keep[tid] = [name_off, kind, vlen, flag, size if target == FUNC_PROTO else 0, words]
            if target == FUNC_PROTO:
                visit(size)
        elif kind == FUNC_PROTO:
            # Arity is all that is read: parameters and return become void.
            params = []
            for i in range(vlen):
                params += [words[2 * i], 0]
            keep[tid] = [name_off, kind, vlen, flag, 0, params]
        elif kind in (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG):
            keep[tid] = [name_off, kind, vlen, flag, size, words]
            visit(size)
        elif kind == ARRAY:
            keep[tid] = [name_off, kind, vlen, flag, size, words]
            visit(words[0])
            visit(words[1])
        elif kind in (INT, FWD, FLOAT):
            keep[tid] = [name_off, kind, vlen, flag, size, words]
        else:
            raise SystemExit("unexpected kind %d reached" % kind)

    for tid in range(1, len(types)):
        name_off, kind, vlen, _flag, _size, words = types[tid]
        nm = name(name_off)
        if kind == STRUCT and nm in STRUCTS:
            visit(tid, full=True)
        elif kind in (ENUM, ENUM64):
            stride = 2 if kind == ENUM else 3
            if any(name(words[stride * i]).startswith(ENUM_PREFIXES) for i in range(vlen)):
                visit(tid)
        elif kind == TYPEDEF and nm.startswith(TYPEDEF_PREFIX):
            visit(tid)

    new_id = {old: new for new, old in enumerate(sorted(keep), start=1)}
    new_id[0] = 0
    out_strings = bytearray(b"\0")
    string_at = {b"": 0}

    def string(off):
        nm = name(off)
        if nm not in string_at:
            string_at[nm] = len(out_strings)
            out_strings.extend(nm + b"\0")
        return string_at[nm]

    out_types = bytearray()
    for old in sorted(keep):
        name_off, kind, vlen, flag, size, words = keep[old]
        words = list(words)
        if kind in (STRUCT, UNION):
            for i in range(vlen):
                words[3 * i] = string(words[3 * i])
                words[3 * i + 1] = new_id[words[3 * i + 1]]
        elif kind == ENUM:
            for i in range(vlen):
                words[2 * i] = string(words[2 * i])
        elif kind == ENUM64:
            for i in range(vlen):
                words[3 * i] = string(words[3 * i])
        elif kind == FUNC_PROTO:
            for i in range(vlen):
                words[2 * i] = string(words[2 * i])
        elif kind == ARRAY:
            words[0], words[1] = new_id[words[0]], new_id[words[1]]
        if kind in (PTR, TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG):
            size = new_id[size]
        info = (flag << 31) | (kind << 24) | vlen
        out_types += struct.pack("<III", string(name_off), info, size)
        out_types += struct.pack("<%dI" % len(words), *words)

    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(out_types),
                         len(out_types), len(out_strings))
    open(dst, "wb").write(header + out_types + out_strings)
    print("%s: %d types, %d bytes" % (dst, len(keep), 24 + len(out_types) + len(out_strings)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
