//! The header of a GGUF model file (versions 2 and 3 of ggml's `docs/gguf.md`, either byte
//! order): the metadata key/values and the tensor infos, never the tensor data.
//!
//! The file is untrusted. Every length and count is checked against what is left of the file
//! before anything is read or allocated, the header is read only up to a cap, and what is kept of
//! a value is capped too (long strings and long arrays are skipped, their type and length kept):
//! a kv count of 2^63 or a string longer than the file is an error naming the offset, never an
//! allocation or a hang. `python/enginespec/_host/fallback/gguf.py` is the pure-Python twin; both
//! give the same header or the same error message for any input.

use std::fs::File;
use std::io;

/// How much of a header is read and kept.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The header (magic to the end of the tensor infos) may be at most this long.
    pub max_header_bytes: u64,
    /// Strings longer than this are skipped (kept as their length).
    pub max_string_bytes: u64,
    /// Arrays longer than this are skipped (kept as their element type and length).
    pub max_array_items: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 << 20,
            max_string_bytes: 64 << 10,
            max_array_items: 4096,
        }
    }
}

/// GGUF metadata value types (`gguf_metadata_value_type`).
pub const TYPE_STRING: u32 = 8;
pub const TYPE_ARRAY: u32 = 9;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// uint8, uint16, uint32, uint64.
    Uint(u64),
    /// int8, int16, int32, int64.
    Int(i64),
    /// float32 (widened), float64.
    Float(f64),
    Bool(bool),
    /// UTF-8 with invalid sequences replaced (U+FFFD).
    Str(String),
    /// A string longer than [`Limits::max_string_bytes`]: its length.
    LongStr(u64),
    /// Element type, length, and the items unless longer than [`Limits::max_array_items`] or
    /// arrays themselves (then `None`).
    Array(u32, u64, Option<Vec<Value>>),
}

/// One tensor info.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// The ggml type (`ggml_type`).
    pub ggml_type: u32,
    pub dims: Vec<u64>,
    /// Offset of its data from the start of the data section.
    pub offset: u64,
    /// Bytes of its data (dims x type size), `None` for a type this reader does not know.
    pub bytes: Option<u64>,
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub version: u32,
    pub big_endian: bool,
    /// Key, value type, value, in file order.
    pub metadata: Vec<(String, u32, Value)>,
    pub tensors: Vec<TensorInfo>,
    /// Where the tensor data starts (after the header, padded to `general.alignment`).
    pub data_offset: u64,
}

/// (block size, bytes per block) of the ggml types (`ggml_type_traits` in ggml/src/ggml.c and
/// ggml-common.h of ggml-org/llama.cpp 004eaba), by type id; removed types are `None`.
pub fn type_size(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        16 => (256, 66),  // IQ2_XXS
        17 => (256, 74),  // IQ2_XS
        18 => (256, 98),  // IQ3_XXS
        19 => (256, 50),  // IQ1_S
        20 => (32, 18),   // IQ4_NL
        21 => (256, 110), // IQ3_S
        22 => (256, 82),  // IQ2_S
        23 => (256, 136), // IQ4_XS
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        29 => (256, 56),  // IQ1_M
        30 => (1, 2),     // BF16
        34 => (256, 54),  // TQ1_0
        35 => (256, 66),  // TQ2_0
        39 => (32, 17),   // MXFP4
        40 => (64, 36),   // NVFP4 (gguf-py 0.19 constants.py)
        41 => (128, 18),  // Q1_0 (gguf-py 0.19 constants.py)
        _ => return None,
    })
}

/// Where bytes come from: a file (positioned reads) or memory.
pub trait Source {
    /// Fills `buf` from `offset`, short only at the end of the source.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl Source for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

#[cfg(unix)]
impl Source for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match FileExt::read_at(self, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

#[cfg(windows)]
impl Source for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match FileExt::seek_read(self, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

/// Bytes read ahead at once.
const CHUNK: usize = 64 << 10;
/// Arrays nest at most this deep.
const MAX_DEPTH: u32 = 8;
/// `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;

struct Reader<'a, S: Source + ?Sized> {
    source: &'a S,
    /// Bytes that may be read: the file's size, or the header cap if smaller.
    end: u64,
    size: u64,
    cap: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    big_endian: bool,
}

impl<S: Source + ?Sized> Reader<'_, S> {
    /// Errors for a read of `n` bytes at the current position that does not fit.
    fn check(&self, n: u64, what: &str) -> Result<(), String> {
        let left = self.end - self.pos;
        if n <= left {
            return Ok(());
        }
        if self.end == self.size {
            Err(format!(
                "{what} at offset {}: needs {n} bytes, the file has {left} left",
                self.pos
            ))
        } else {
            Err(format!(
                "{what} at offset {}: the header is longer than the cap of {} bytes",
                self.pos, self.cap
            ))
        }
    }

    /// Errors unless `count` items of at least `each` bytes fit in what is left, naming the
    /// count read at `at`.
    fn count_fits(&self, count: u64, each: u64, what: &str, at: u64) -> Result<(), String> {
        let left = self.end - self.pos;
        if count.checked_mul(each).is_some_and(|least| least <= left) {
            return Ok(());
        }
        Err(format!(
            "{what} {count} at offset {at}: more than the {left} bytes left can hold"
        ))
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), String> {
        self.check(n, what)?;
        self.pos += n;
        Ok(())
    }

    /// `n` bytes at the current position (checked), through the read-ahead buffer.
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], String> {
        self.check(n as u64, what)?;
        let buf_end = self.buf_start + self.buf.len() as u64;
        if self.pos < self.buf_start || self.pos + n as u64 > buf_end {
            let want = (n.max(CHUNK) as u64).min(self.end - self.pos) as usize;
            self.buf.resize(want, 0);
            let got = self
                .source
                .read_at(&mut self.buf, self.pos)
                .map_err(|e| format!("{what} at offset {}: {e}", self.pos))?;
            self.buf.truncate(got);
            self.buf_start = self.pos;
            if got < n {
                return Err(format!(
                    "{what} at offset {}: the file ended while being read",
                    self.pos
                ));
            }
        }
        let at = (self.pos - self.buf_start) as usize;
        self.pos += n as u64;
        Ok(&self.buf[at..at + n])
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        if self.big_endian {
            out.reverse();
        }
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.fixed::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.fixed::<8>(what).map(u64::from_le_bytes)
    }

    /// A string (u64 length + bytes): `Err` if it does not fit, `Ok(None)` (skipped) if longer
    /// than `keep`.
    fn string(&mut self, keep: u64, what: &str) -> Result<Result<String, u64>, String> {
        let len = self.u64(what)?;
        if len > keep {
            self.skip(len, what)?;
            return Ok(Err(len));
        }
        let bytes = self.take(len as usize, what)?;
        Ok(Ok(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// The smallest encoding of an element of type `t`, for the count check of an array.
    fn min_size(t: u32) -> u64 {
        match t {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            TYPE_ARRAY => 12,
            _ => 8,
        }
    }

    /// A value of type `t`; `keep: false` (inside an array that is not kept) only skips it, so
    /// a string is not read and a bool not checked.
    fn value(
        &mut self,
        t: u32,
        depth: u32,
        keep: bool,
        limits: &Limits,
        what: &str,
    ) -> Result<Value, String> {
        if !keep && t != TYPE_STRING && t != TYPE_ARRAY && t <= 12 {
            self.skip(Self::min_size(t), what)?;
            return Ok(Value::Bool(false));
        }
        Ok(match t {
            0 => Value::Uint(u64::from(self.fixed::<1>(what)?[0])),
            1 => Value::Int(i64::from(self.fixed::<1>(what)?[0] as i8)),
            2 => Value::Uint(u64::from(u16::from_le_bytes(self.fixed(what)?))),
            3 => Value::Int(i64::from(i16::from_le_bytes(self.fixed(what)?))),
            4 => Value::Uint(u64::from(u32::from_le_bytes(self.fixed(what)?))),
            5 => Value::Int(i64::from(i32::from_le_bytes(self.fixed(what)?))),
            6 => Value::Float(f64::from(f32::from_le_bytes(self.fixed(what)?))),
            7 => match self.fixed::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => return Err(format!("{what}: bool of value {other}")),
            },
            TYPE_STRING if !keep => {
                let len = self.u64(what)?;
                self.skip(len, what)?;
                Value::LongStr(len)
            }
            TYPE_STRING => match self.string(limits.max_string_bytes, what)? {
                Ok(s) => Value::Str(s),
                Err(len) => Value::LongStr(len),
            },
            TYPE_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(format!("{what}: arrays nested deeper than {MAX_DEPTH}"));
                }
                let elem = self.u32(what)?;
                let at = self.pos;
                let count = self.u64(what)?;
                if elem > 12 {
                    return Err(format!("{what}: array of unknown type {elem}"));
                }
                // Every element takes at least this much: a count the file cannot hold is refused
                // before any element is read.
                self.count_fits(
                    count,
                    Self::min_size(elem),
                    &format!("{what}: array length"),
                    at,
                )?;
                let kept = keep && count <= limits.max_array_items && elem != TYPE_ARRAY;
                if !kept && elem != TYPE_STRING && elem != TYPE_ARRAY {
                    // checked above: fits in the file
                    self.skip(count * Self::min_size(elem), what)?;
                    return Ok(Value::Array(elem, count, None));
                }
                let mut items = Vec::new();
                for _ in 0..count {
                    let item = self.value(elem, depth + 1, kept, limits, what)?;
                    if kept {
                        items.push(item);
                    }
                }
                Value::Array(elem, count, kept.then_some(items))
            }
            10 => Value::Uint(u64::from_le_bytes(self.fixed(what)?)),
            11 => Value::Int(i64::from_le_bytes(self.fixed(what)?)),
            12 => Value::Float(f64::from_le_bytes(self.fixed(what)?)),
            other => return Err(format!("{what}: unknown value type {other}")),
        })
    }
}

/// Reads the header of a GGUF file of `size` bytes from `source`.
pub fn read_header<S: Source + ?Sized>(
    source: &S,
    size: u64,
    limits: &Limits,
) -> Result<Header, String> {
    let mut r = Reader {
        source,
        end: size.min(limits.max_header_bytes),
        size,
        cap: limits.max_header_bytes,
        pos: 0,
        buf: Vec::new(),
        buf_start: 0,
        big_endian: false,
    };
    let magic = r.take(4, "magic")?;
    if magic != b"GGUF" {
        return Err(format!("not a GGUF file (magic {})", escape(magic)));
    }
    let mut version = r.u32("version")?;
    if version & 0xFFFF == 0 {
        // Written on a big-endian host: every number is byte-swapped (ggml's gguf.md, version 3).
        r.big_endian = true;
        version = version.swap_bytes();
    }
    if version != 2 && version != 3 {
        return Err(format!("GGUF version {version}: only 2 and 3 are read"));
    }
    let tensor_count = r.u64("tensor count")?;
    let kv_count = r.u64("metadata count")?;
    // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info 8 + 4 + 4 + 8.
    r.count_fits(kv_count, 13, "metadata count", 16)?;
    let mut metadata = Vec::new();
    let mut alignment = 32u64;
    for index in 0..kv_count {
        let key = match r.string(limits.max_string_bytes, "metadata key")? {
            Ok(key) => key,
            Err(len) => return Err(format!("metadata key {index}: {len} bytes long")),
        };
        let what = format!("metadata {}", escape(key.as_bytes()));
        let t = r.u32(&what)?;
        let value = r.value(t, 0, true, limits, &what)?;
        if key == "general.alignment" {
            alignment = match value {
                Value::Uint(a) if t == 4 && a > 0 && a.is_power_of_two() => a,
                _ => return Err(format!("{what}: not a power of two as uint32")),
            };
        }
        metadata.push((key, t, value));
    }
    r.count_fits(tensor_count, 24, "tensor count", 8)?;
    let mut tensors = Vec::new();
    for index in 0..tensor_count {
        let name = match r.string(limits.max_string_bytes, "tensor name")? {
            Ok(name) => name,
            Err(len) => return Err(format!("tensor {index}: name {len} bytes long")),
        };
        let what = format!("tensor {}", escape(name.as_bytes()));
        let n_dims = r.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(format!("{what}: {n_dims} dimensions (at most {MAX_DIMS})"));
        }
        let mut dims = Vec::new();
        for _ in 0..n_dims {
            dims.push(r.u64(&what)?);
        }
        let ggml_type = r.u32(&what)?;
        let offset = r.u64(&what)?;
        if offset % alignment != 0 {
            return Err(format!(
                "{what}: offset {offset} not aligned to {alignment}"
            ));
        }
        let bytes = tensor_bytes(&dims, ggml_type).map_err(|e| format!("{what}: {e}"))?;
        tensors.push(TensorInfo {
            name,
            ggml_type,
            dims,
            offset,
            bytes,
        });
    }
    let data_offset = r.pos.div_ceil(alignment) * alignment;
    Ok(Header {
        version,
        big_endian: r.big_endian,
        metadata,
        tensors,
        data_offset,
    })
}

/// Bytes of a tensor's data; `Ok(None)` for an unknown type.
fn tensor_bytes(dims: &[u64], ggml_type: u32) -> Result<Option<u64>, String> {
    let Some((block, size)) = type_size(ggml_type) else {
        return Ok(None);
    };
    let first = dims.first().copied().unwrap_or(1);
    if first % block != 0 {
        return Err(format!(
            "first dimension {first} is not a multiple of the block size {block}"
        ));
    }
    let mut total = (first / block)
        .checked_mul(size)
        .ok_or("size overflows 64 bits")?;
    for &d in dims.iter().skip(1) {
        total = total.checked_mul(d).ok_or("size overflows 64 bits")?;
    }
    Ok(Some(total))
}

/// Bytes shown in a message: printable ASCII as is, the rest as `\xNN`; at most 64 of them.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::from("'");
    for &b in bytes.iter().take(64) {
        if (0x20..0x7f).contains(&b) && b != b'\'' && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 64 {
        out.push_str("...");
    }
    out.push('\'');
    out
}

/// Reads the header of an open file.
pub fn read_file(file: &File, limits: &Limits) -> Result<Header, String> {
    let meta = file.metadata().map_err(|e| format!("stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    read_header(file, meta.len(), limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }

    /// A v3 file: one u32 kv, one string kv, one f16 tensor [64, 2].
    fn small() -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&1u64.to_le_bytes());
        f.extend_from_slice(&2u64.to_le_bytes());
        string(&mut f, b"general.architecture");
        f.extend_from_slice(&8u32.to_le_bytes());
        string(&mut f, b"llama");
        string(&mut f, b"llama.block_count");
        f.extend_from_slice(&4u32.to_le_bytes());
        f.extend_from_slice(&2u32.to_le_bytes());
        string(&mut f, b"blk.0.attn_q.weight");
        f.extend_from_slice(&2u32.to_le_bytes());
        f.extend_from_slice(&64u64.to_le_bytes());
        f.extend_from_slice(&2u64.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u64.to_le_bytes());
        f
    }

    #[test]
    fn reads_a_small_header() {
        let f = small();
        let h = read_header(&f[..], f.len() as u64, &Limits::default()).unwrap();
        assert_eq!(h.version, 3);
        assert_eq!(
            h.metadata[0],
            ("general.architecture".into(), 8, Value::Str("llama".into()))
        );
        assert_eq!(h.metadata[1].2, Value::Uint(2));
        assert_eq!(h.tensors[0].bytes, Some(256));
        assert_eq!(h.data_offset, (f.len() as u64).div_ceil(32) * 32);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let f = small();
        for cut in 0..f.len() {
            let err = read_header(&f[..cut], cut as u64, &Limits::default()).unwrap_err();
            assert!(
                err.contains("left") || err.contains("magic"),
                "{cut}: {err}"
            );
        }
    }

    #[test]
    fn huge_counts_are_refused_before_reading() {
        let mut f = small();
        f[16..24].copy_from_slice(&(1u64 << 63).to_le_bytes());
        let err = read_header(&f[..], f.len() as u64, &Limits::default()).unwrap_err();
        assert!(
            err.starts_with("metadata count 9223372036854775808 at offset 16"),
            "{err}"
        );
        let mut f = small();
        // the first key's length
        f[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let err = read_header(&f[..], f.len() as u64, &Limits::default()).unwrap_err();
        assert!(err.starts_with("metadata key at offset 32: needs"), "{err}");
    }

    #[test]
    fn a_sparse_size_does_not_change_the_header() {
        let f = small();
        let limits = Limits::default();
        let a = read_header(&f[..], f.len() as u64, &limits).unwrap();
        // A source that says it is 20 GB: the header is read from its start only.
        let b = read_header(&f[..], 20 << 30, &limits).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn big_endian_files_are_read() {
        let mut f = b"GGUF".to_vec();
        f.extend_from_slice(&3u32.to_be_bytes());
        f.extend_from_slice(&0u64.to_be_bytes());
        f.extend_from_slice(&1u64.to_be_bytes());
        f.extend_from_slice(&4u64.to_be_bytes());
        f.extend_from_slice(b"a.bc");
        f.extend_from_slice(&4u32.to_be_bytes());
        f.extend_from_slice(&7u32.to_be_bytes());
        let h = read_header(&f[..], f.len() as u64, &Limits::default()).unwrap();
        assert!(h.big_endian);
        assert_eq!(h.metadata[0], ("a.bc".into(), 4, Value::Uint(7)));
    }
}
