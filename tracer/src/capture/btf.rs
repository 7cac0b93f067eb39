//! A small reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`): struct
//! member offsets and enumerator values, which is all the BTF-tracepoint
//! probes need to read `struct bio` and `struct request` on any kernel.

use std::ops::Range;
use std::path::PathBuf;

const MAGIC: u16 = 0xeb9f;
const HEADER_BYTES: usize = 24;
const TYPE_BYTES: usize = 12;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Members one lookup may visit through anonymous ones: far above any
/// kernel's, low enough that self-nested anonymous members cannot stall start-up.
const MEMBER_VISITS: usize = 1 << 16;
/// Array dimensions followed when sizing a member (a corrupt array may hold itself).
const ARRAY_DEPTH: usize = 8;

/// Why BTF bytes were refused.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not little-endian BTF (bad magic)")]
    BadMagic,
    #[error("BTF header is truncated")]
    TruncatedHeader,
    #[error("BTF header is {0} bytes, shorter than the {HEADER_BYTES} it must hold")]
    ShortHeader(usize),
    #[error("BTF sections run past the end of the data")]
    SectionsPastEnd,
    #[error("BTF type {id} is truncated")]
    TruncatedType { id: usize },
    #[error("BTF type {id} has unknown kind {kind}")]
    UnknownKind { id: usize, kind: u32 },
}

/// Parsed type and string sections; types are indexed by BTF id (id 0 is void).
pub struct Btf {
    bytes: Vec<u8>,
    strings: Range<usize>,
    /// Byte position of each type record, by id - 1.
    types: Vec<usize>,
}

/// Where a struct member lies: byte offset from the struct's start and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub offset: u32,
    pub size: u32,
}

#[derive(Clone, Copy)]
struct Type {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    size_or_type: u32,
    /// Position of the kind-specific data after the common record.
    extra: usize,
}

impl Btf {
    pub fn from_sys_fs() -> Result<Btf, BtfError> {
        let path = PathBuf::from("/sys/kernel/btf/vmlinux");
        let bytes = std::fs::read(&path).map_err(|source| BtfError::Read { path, source })?;
        Btf::parse(bytes)
    }

    /// Checks the header and indexes every type record; lookups that then
    /// meet inconsistent records answer `None` rather than misread.
    pub fn parse(bytes: Vec<u8>) -> Result<Btf, BtfError> {
        let u16_at = |at: usize| {
            bytes
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        if u16_at(0) != Some(MAGIC) {
            return Err(BtfError::BadMagic);
        }
        let word = |at: usize| read_u32(&bytes, at).ok_or(BtfError::TruncatedHeader);
        let header_len = word(4)? as usize;
        let type_off = word(8)? as usize;
        let type_len = word(12)? as usize;
        let str_off = word(16)? as usize;
        let str_len = word(20)? as usize;
        if header_len < HEADER_BYTES {
            return Err(BtfError::ShortHeader(header_len));
        }
        let types_range = header_len + type_off..header_len + type_off + type_len;
        let strings = header_len + str_off..header_len + str_off + str_len;
        if types_range.end > bytes.len() || strings.end > bytes.len() {
            return Err(BtfError::SectionsPastEnd);
        }
        let mut btf = Btf {
            bytes,
            strings,
            types: Vec::new(),
        };
        let mut at = types_range.start;
        while at < types_range.end {
            btf.types.push(at);
            let id = btf.types.len();
            let ty = btf.type_at(at).ok_or(BtfError::TruncatedType { id })?;
            at = ty.extra + extra_bytes(&ty).ok_or(BtfError::UnknownKind { id, kind: ty.kind })?;
        }
        Ok(btf)
    }

    fn type_at(&self, at: usize) -> Option<Type> {
        let info = read_u32(&self.bytes, at + 4)?;
        Some(Type {
            name_off: read_u32(&self.bytes, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: read_u32(&self.bytes, at + 8)?,
            extra: at + TYPE_BYTES,
        })
    }

    fn by_id(&self, id: u32) -> Option<Type> {
        let at = *self.types.get((id as usize).checked_sub(1)?)?;
        self.type_at(at)
    }

    fn name(&self, name_off: u32) -> &[u8] {
        let start = self.strings.start + name_off as usize;
        let tail = self.bytes.get(start..self.strings.end).unwrap_or_default();
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        &tail[..end]
    }

    /// Skips typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<Type> {
        for _ in 0..32 {
            let ty = self.by_id(id)?;
            match ty.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = ty.size_or_type
                }
                _ => return Some(ty),
            }
        }
        None
    }

    fn size_of(&self, id: u32, depth: usize) -> Option<u32> {
        let ty = self.resolve(id)?;
        match ty.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => Some(ty.size_or_type),
            KIND_PTR => Some(8),
            KIND_ARRAY if depth < ARRAY_DEPTH => {
                let element = read_u32(&self.bytes, ty.extra)?;
                let count = read_u32(&self.bytes, ty.extra + 8)?;
                self.size_of(element, depth + 1)?.checked_mul(count)
            }
            _ => None,
        }
    }

    fn find_struct(&self, name: &str) -> Option<Type> {
        self.types
            .iter()
            .filter_map(|&at| self.type_at(at))
            .find(|ty| ty.kind == KIND_STRUCT && self.name(ty.name_off) == name.as_bytes())
    }

    /// `struct name`'s member `path` (nested members joined, e.g. `["bi_iter",
    /// "bi_sector"]`), looking through anonymous unions and structs. `None`
    /// also when the member would end past `u32::MAX` bytes.
    pub fn member(&self, name: &str, path: &[&str]) -> Option<Member> {
        let mut ty = self.find_struct(name)?;
        let mut offset = 0u32;
        let mut size = 0u32;
        for (depth, field) in path.iter().enumerate() {
            let mut visits = MEMBER_VISITS;
            let (member_offset, member_type) =
                self.find_member(&ty, field.as_bytes(), 0, &mut visits)?;
            offset = offset.checked_add(member_offset)?;
            size = self.size_of(member_type, 0)?;
            if depth + 1 < path.len() {
                ty = self.resolve(member_type)?;
            }
        }
        offset.checked_add(size)?;
        Some(Member { offset, size })
    }

    /// (byte offset, type id) of a named member, searching anonymous members
    /// too, visiting at most `visits` members in all.
    fn find_member(
        &self,
        ty: &Type,
        field: &[u8],
        depth: usize,
        visits: &mut usize,
    ) -> Option<(u32, u32)> {
        if !matches!(ty.kind, KIND_STRUCT | KIND_UNION) || depth > 8 {
            return None;
        }
        for index in 0..ty.vlen {
            *visits = visits.checked_sub(1)?;
            let at = ty.extra + index * 12;
            let name_off = read_u32(&self.bytes, at)?;
            let member_type = read_u32(&self.bytes, at + 4)?;
            let raw_offset = read_u32(&self.bytes, at + 8)?;
            let (bit_offset, bitfield) = match ty.kind_flag {
                true => (raw_offset & 0xff_ffff, raw_offset >> 24 != 0),
                false => (raw_offset, false),
            };
            let name = self.name(name_off);
            if name == field {
                // A bitfield or an unaligned member cannot be read as bytes.
                return (!bitfield && bit_offset % 8 == 0).then_some((bit_offset / 8, member_type));
            }
            if name.is_empty() {
                let inner = self.resolve(member_type)?;
                if let Some((offset, id)) = self.find_member(&inner, field, depth + 1, visits) {
                    return Some(((bit_offset / 8).checked_add(offset)?, id));
                }
            }
        }
        None
    }

    /// Parameters of a tracepoint's prototype, from its `btf_trace_<name>`
    /// typedef (the first is the probe's `void *` data); `None` if absent.
    pub fn tracepoint_arity(&self, tracepoint: &str) -> Option<usize> {
        let name = format!("btf_trace_{tracepoint}");
        let typedef = self
            .types
            .iter()
            .filter_map(|&at| self.type_at(at))
            .find(|ty| ty.kind == KIND_TYPEDEF && self.name(ty.name_off) == name.as_bytes())?;
        let pointer = self.resolve(typedef.size_or_type)?;
        let proto = match pointer.kind {
            KIND_PTR => self.resolve(pointer.size_or_type)?,
            _ => pointer,
        };
        (proto.kind == KIND_FUNC_PROTO).then_some(proto.vlen)
    }

    /// The value of an enumerator, found by its (unique) name in any enum.
    pub fn enumerator(&self, name: &str) -> Option<i64> {
        for ty in self.types.iter().filter_map(|&at| self.type_at(at)) {
            let stride = match ty.kind {
                KIND_ENUM => 8,
                KIND_ENUM64 => 12,
                _ => continue,
            };
            for index in 0..ty.vlen {
                let at = ty.extra + index * stride;
                if self.name(read_u32(&self.bytes, at)?) != name.as_bytes() {
                    continue;
                }
                let low = read_u32(&self.bytes, at + 4)?;
                return Some(match ty.kind {
                    KIND_ENUM => i64::from(low as i32),
                    _ => (i64::from(read_u32(&self.bytes, at + 8)?) << 32) | i64::from(low),
                });
            }
        }
        None
    }
}

/// Bytes of kind-specific data after a type's common record; `None` for a kind
/// this reader does not know.
fn extra_bytes(ty: &Type) -> Option<usize> {
    Some(match ty.kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * ty.vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * ty.vlen,
        0 | KIND_PTR | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | 12 | 16
        | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a little BTF blob: types as (name, kind, vlen, size_or_type, extra words).
    pub(crate) struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Builder {
        pub(crate) fn new() -> Builder {
            Builder {
                types: Vec::new(),
                strings: vec![0],
                next_id: 1,
            }
        }

        fn string(&mut self, name: &str) -> u32 {
            if name.is_empty() {
                return 0;
            }
            let at = self.strings.len() as u32;
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            at
        }

        fn push(
            &mut self,
            name: &str,
            kind: u32,
            vlen: u32,
            flag: bool,
            size: u32,
            extra: &[u32],
        ) -> u32 {
            let name_off = self.string(name);
            let info = (kind << 24) | vlen | (u32::from(flag) << 31);
            for word in [name_off, info, size].iter().chain(extra) {
                self.types.extend_from_slice(&word.to_le_bytes());
            }
            self.next_id += 1;
            self.next_id - 1
        }

        /// The id the next type will get (for types that refer to themselves).
        pub(crate) fn next_id(&self) -> u32 {
            self.next_id
        }

        pub(crate) fn array(&mut self, element: u32, index: u32, count: u32) -> u32 {
            self.push("", KIND_ARRAY, 0, false, 0, &[element, index, count])
        }

        /// A function prototype with `params` unnamed `int`-less parameters.
        pub(crate) fn func_proto(&mut self, params: u32) -> u32 {
            let extra: Vec<u32> = (0..params).flat_map(|_| [0, 0]).collect();
            self.push("", KIND_FUNC_PROTO, params, false, 0, &extra)
        }

        pub(crate) fn int(&mut self, name: &str, bytes: u32) -> u32 {
            self.push(name, KIND_INT, 0, false, bytes, &[bytes * 8])
        }

        pub(crate) fn ptr(&mut self, to: u32) -> u32 {
            self.push("", KIND_PTR, 0, false, to, &[])
        }

        pub(crate) fn typedef(&mut self, name: &str, to: u32) -> u32 {
            self.push(name, KIND_TYPEDEF, 0, false, to, &[])
        }

        /// Members as (name, type id, byte offset).
        pub(crate) fn aggregate(
            &mut self,
            name: &str,
            union: bool,
            size: u32,
            members: &[(&str, u32, u32)],
        ) -> u32 {
            let mut extra = Vec::new();
            for (member, ty, offset) in members {
                extra.extend([self.string(member), *ty, offset * 8]);
            }
            let kind = if union { KIND_UNION } else { KIND_STRUCT };
            self.push(name, kind, members.len() as u32, false, size, &extra)
        }

        pub(crate) fn enumeration(&mut self, name: &str, values: &[(&str, i32)]) -> u32 {
            let mut extra = Vec::new();
            for (value_name, value) in values {
                extra.extend([self.string(value_name), *value as u32]);
            }
            self.push(name, KIND_ENUM, values.len() as u32, false, 4, &extra)
        }

        pub(crate) fn build(self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC.to_le_bytes());
            out.extend_from_slice(&[1, 0]);
            for word in [
                HEADER_BYTES as u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                out.extend_from_slice(&word.to_le_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    #[test]
    fn members_are_found_through_anonymous_unions_and_nested_structs() {
        let mut b = Builder::new();
        let u32_id = b.int("unsigned int", 4);
        let u64_id = b.int("long long unsigned int", 8);
        let sector_t = b.typedef("sector_t", u64_id);
        let iter = b.aggregate(
            "bvec_iter",
            false,
            16,
            &[("bi_sector", sector_t, 0), ("bi_size", u32_id, 8)],
        );
        let anon = b.aggregate("", true, 8, &[("bi_opf", u32_id, 0), ("other", u64_id, 0)]);
        let bio = b.aggregate(
            "bio",
            false,
            40,
            &[("bi_next", u64_id, 0), ("", anon, 8), ("bi_iter", iter, 16)],
        );
        let _ = b.ptr(bio);
        b.enumeration(
            "req_flag_bits",
            &[("__REQ_FAILFAST_DEV", 8), ("__REQ_FUA", 17)],
        );
        let btf = Btf::parse(b.build()).unwrap();
        assert_eq!(
            btf.member("bio", &["bi_opf"]),
            Some(Member { offset: 8, size: 4 })
        );
        assert_eq!(
            btf.member("bio", &["bi_iter", "bi_sector"]),
            Some(Member {
                offset: 16,
                size: 8
            })
        );
        assert_eq!(
            btf.member("bio", &["bi_iter", "bi_size"]),
            Some(Member {
                offset: 24,
                size: 4
            })
        );
        assert_eq!(btf.member("bio", &["bi_missing"]), None);
        assert_eq!(btf.member("request", &["q"]), None);
        assert_eq!(btf.enumerator("__REQ_FUA"), Some(17));
        assert_eq!(btf.enumerator("__REQ_NOPE"), None);
    }

    #[test]
    fn garbage_is_refused_not_misread() {
        assert!(Btf::parse(vec![0; 10]).is_err());
        let mut truncated = Builder::new();
        truncated.int("int", 4);
        let mut bytes = truncated.build();
        bytes.truncate(30);
        assert!(Btf::parse(bytes).is_err());
    }

    // Regressions: shapes a hostile or corrupt BTF can take. Each once
    // panicked, overflowed the stack or hung; each must now be refused.

    #[test]
    fn an_array_of_itself_has_no_size() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let array = b.next_id();
        assert_eq!(b.array(array, int, 2), array);
        b.aggregate("bio", false, 8, &[("bi_opf", array, 0)]);
        let btf = Btf::parse(b.build()).unwrap();
        assert_eq!(btf.member("bio", &["bi_opf"]), None);
    }

    #[test]
    fn self_nested_anonymous_members_are_searched_in_bounded_time() {
        let mut b = Builder::new();
        let union = b.next_id();
        let anonymous: Vec<(&str, u32, u32)> = (0..16).map(|_| ("", union, 0)).collect();
        assert_eq!(b.aggregate("", true, 8, &anonymous), union);
        b.aggregate("bio", false, 8, &anonymous);
        let btf = Btf::parse(b.build()).unwrap();
        let start = std::time::Instant::now();
        assert_eq!(btf.member("bio", &["bi_missing"]), None);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn member_offsets_past_4_gib_are_refused() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        // Eight anonymous levels (the most searched), each 512 MiB further in,
        // then the member: nine offsets of 512 MiB add up past u32::MAX.
        let mut inner = b.aggregate("", false, 4, &[("deep", int, 0x1fff_ffff)]);
        for _ in 0..7 {
            inner = b.aggregate("", false, 4, &[("", inner, 0x1fff_ffff)]);
        }
        b.aggregate("bio", false, 4, &[("", inner, 0x1fff_ffff)]);
        let btf = Btf::parse(b.build()).unwrap();
        assert_eq!(btf.member("bio", &["deep"]), None);
    }
}
