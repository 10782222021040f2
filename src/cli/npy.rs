//! Reading and writing NumPy `.npy` files (through `npyz`) as little-endian element bytes.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use kiln::ir::Scalar;
use npyz::{DType, NpyFile, Order, TypeChar, TypeStr, WriterBuilder};

/// Why bf16 buffers are refused: plain NumPy has no bfloat16 dtype.
const NO_BF16: &str = "bf16 buffers have no .npy form (NumPy has no bfloat16 dtype); \
                       give zeros:N or iota:N";

/// NumPy's name for the dtype that holds `s` (`float32`, `int8`, `bool`, ...).
pub fn numpy_name(s: Scalar) -> &'static str {
    match s {
        Scalar::Bool => "bool",
        Scalar::I8 => "int8",
        Scalar::I16 => "int16",
        Scalar::I32 => "int32",
        Scalar::I64 => "int64",
        Scalar::U8 => "uint8",
        Scalar::U16 => "uint16",
        Scalar::U32 => "uint32",
        Scalar::U64 => "uint64",
        Scalar::F16 => "float16",
        Scalar::F32 => "float32",
        Scalar::F64 => "float64",
        Scalar::BF16 => "bfloat16",
    }
}

/// The kiln scalar a plain NumPy dtype corresponds to, if any (either byte order).
fn scalar_of(ts: &TypeStr) -> Option<Scalar> {
    use Scalar::*;
    let s = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => Bool,
        (TypeChar::Int, 1) => I8,
        (TypeChar::Int, 2) => I16,
        (TypeChar::Int, 4) => I32,
        (TypeChar::Int, 8) => I64,
        (TypeChar::Uint, 1) => U8,
        (TypeChar::Uint, 2) => U16,
        (TypeChar::Uint, 4) => U32,
        (TypeChar::Uint, 8) => U64,
        (TypeChar::Float, 2) => F16,
        (TypeChar::Float, 4) => F32,
        (TypeChar::Float, 8) => F64,
        _ => return None,
    };
    Some(s)
}

/// How to name a file's dtype in a message: NumPy's name and the type string (`float64 (<f8)`).
fn describe(dtype: &DType) -> String {
    match dtype {
        DType::Plain(ts) => match scalar_of(ts) {
            Some(s) => format!("{} ({ts})", numpy_name(s)),
            None => format!("`{ts}`"),
        },
        DType::Array(..) => "a sub-array dtype".to_string(),
        DType::Record(_) => "a structured (record) dtype".to_string(),
    }
}

/// Reads a `.npy` file whose dtype must be exactly the one for `elem` (either byte order).
/// Arrays of any shape are flattened in C (row-major) order; 0-d arrays and Fortran-ordered
/// arrays of 2 or more dimensions are refused. Returns the elements as little-endian bytes.
pub fn read(path: &Path, elem: Scalar) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| format!("cannot open `{shown}`: {e}"))?;
    let size = file.metadata().map_err(|e| format!("cannot read `{shown}`: {e}"))?.len();
    // Before npyz reads the header: it allocates the length the file claims.
    if let Some(offset) = data_offset(path).filter(|&o| o > size) {
        return Err(format!(
            "`{shown}` is not a valid .npy file: its header would end at byte {offset}, but \
             the file has {size} bytes"
        ));
    }
    // Before npyz reads the header: it multiplies the shape without an overflow check.
    if let Some(dims) = header_shape(path) {
        let count = dims.iter().try_fold(1u128, |n, &d| n.checked_mul(d));
        if count.is_none_or(|n| n > u128::from(u64::MAX)) {
            let dims: Vec<String> = dims.iter().map(u128::to_string).collect();
            return Err(format!(
                "`{shown}` has shape ({}), whose size overflows 64 bits; the header is corrupt",
                dims.join(", ")
            ));
        }
    }
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| format!("`{shown}` is not a valid .npy file: {e}"))?;
    let dtype = npy.dtype();
    let found = match &dtype {
        DType::Plain(ts) => scalar_of(ts),
        _ => None,
    };
    if found != Some(elem) {
        return Err(format!(
            "`{shown}` has dtype {} but the parameter needs {} ({elem}); convert it, e.g. \
             with `a.astype(numpy.{})`",
            describe(&dtype),
            numpy_name(elem),
            numpy_name(elem),
        ));
    }
    let shape = npy.shape().to_vec();
    if shape.is_empty() {
        return Err(format!("`{shown}` holds a 0-d array (a scalar); a buffer needs an array"));
    }
    check_data_size(path, &shape, elem)?;
    if npy.order() == Order::Fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(format!(
            "`{shown}` is in Fortran order; save a C-ordered array (numpy.ascontiguousarray)"
        ));
    }
    let bad = |e: std::io::Error| format!("cannot read the data of `{shown}`: {e}");
    let mut out = Vec::new();
    match elem {
        Scalar::Bool => out.extend(npy.into_vec::<bool>().map_err(bad)?.into_iter().map(u8::from)),
        Scalar::I8 => extend(&mut out, npy.into_vec::<i8>().map_err(bad)?, i8::to_le_bytes),
        Scalar::I16 => extend(&mut out, npy.into_vec::<i16>().map_err(bad)?, i16::to_le_bytes),
        Scalar::I32 => extend(&mut out, npy.into_vec::<i32>().map_err(bad)?, i32::to_le_bytes),
        Scalar::I64 => extend(&mut out, npy.into_vec::<i64>().map_err(bad)?, i64::to_le_bytes),
        Scalar::U8 => out = npy.into_vec::<u8>().map_err(bad)?,
        Scalar::U16 => extend(&mut out, npy.into_vec::<u16>().map_err(bad)?, u16::to_le_bytes),
        Scalar::U32 => extend(&mut out, npy.into_vec::<u32>().map_err(bad)?, u32::to_le_bytes),
        Scalar::U64 => extend(&mut out, npy.into_vec::<u64>().map_err(bad)?, u64::to_le_bytes),
        Scalar::F16 => {
            extend(&mut out, npy.into_vec::<half::f16>().map_err(bad)?, half::f16::to_le_bytes)
        }
        Scalar::F32 => extend(&mut out, npy.into_vec::<f32>().map_err(bad)?, f32::to_le_bytes),
        Scalar::F64 => extend(&mut out, npy.into_vec::<f64>().map_err(bad)?, f64::to_le_bytes),
        Scalar::BF16 => return Err(NO_BF16.to_string()),
    }
    Ok(out)
}

/// Checks that the header's shape describes exactly the data the file holds, before anything
/// is allocated for it. A shape whose element count overflows 64 bits is refused, as NumPy
/// refuses it (a reader multiplying with wrap-around would load a few elements of a
/// "huge" array); so is a count that does not match the bytes after the header (too few would
/// fail mid-read, too many would be silently dropped), which also keeps a forged header from
/// making kiln allocate more than the file's size.
fn check_data_size(path: &Path, shape: &[u64], elem: Scalar) -> Result<(), String> {
    let shown = path.display();
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let dims = format!("({}{})", dims.join(", "), if shape.len() == 1 { "," } else { "" });
    let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let bytes = count.and_then(|n| n.checked_mul(elem.size_bytes() as u64));
    let Some(bytes) = bytes else {
        return Err(format!(
            "`{shown}` has shape {dims}, whose size overflows 64 bits; the header is corrupt"
        ));
    };
    let size = std::fs::metadata(path).map_err(|e| format!("cannot read `{shown}`: {e}"))?.len();
    let offset = data_offset(path).ok_or_else(|| format!("cannot read the header of `{shown}`"))?;
    let data = size.saturating_sub(offset);
    if data != bytes {
        return Err(format!(
            "`{shown}` has shape {dims} of {} ({bytes} bytes of data) but holds {data} bytes \
             after its header",
            numpy_name(elem)
        ));
    }
    Ok(())
}

/// The `shape` tuple of a `.npy` header, read leniently (`None` if it cannot be found, which
/// leaves the error to the real header parser); dimensions too large for `u128` read as
/// `u128::MAX`, which overflows any check.
fn header_shape(path: &Path) -> Option<Vec<u128>> {
    use std::io::Read;
    let mut head = Vec::new();
    File::open(path).ok()?.take(1 << 20).read_to_end(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head);
    let after = &text[text.find("'shape'").or_else(|| text.find("\"shape\""))? + 7..];
    let tuple = &after[after.find('(')? + 1..];
    let tuple = &tuple[..tuple.find(')')?];
    tuple
        .split(',')
        .map(|d| d.trim().trim_end_matches('L'))
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.bytes().all(|b| b.is_ascii_digit()).then(|| d.parse::<u128>().unwrap_or(u128::MAX))
        })
        .collect()
}

/// Where a `.npy` file's data starts: after the magic, the version, the header length (2
/// bytes in version 1, else 4) and the header. `None` when the file is too short or has no
/// `.npy` magic, which leaves the error to the real parser.
fn data_offset(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut f = File::open(path).ok()?;
    let mut pre = [0u8; 12];
    f.read_exact(&mut pre[..10]).ok()?;
    if &pre[..6] != b"\x93NUMPY" {
        return None;
    }
    if pre[6] == 1 {
        Some(10 + u64::from(u16::from_le_bytes([pre[8], pre[9]])))
    } else {
        f.read_exact(&mut pre[10..12]).ok()?;
        Some(12 + u64::from(u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]])))
    }
}

fn extend<T, const N: usize>(out: &mut Vec<u8>, values: Vec<T>, le: fn(T) -> [u8; N]) {
    out.reserve(values.len() * N);
    for v in values {
        out.extend_from_slice(&le(v));
    }
}

/// Writes little-endian element bytes as a 1-D `.npy` array of `elem`'s dtype.
pub fn write(path: &Path, elem: Scalar, bytes: &[u8]) -> Result<(), String> {
    let size = elem.size_bytes();
    let chunks = bytes.chunks_exact(size);
    let res = match elem {
        Scalar::Bool => write_typed(path, chunks.map(|c| c[0] != 0)),
        Scalar::I8 => write_typed(path, chunks.map(|c| i8::from_le_bytes([c[0]]))),
        Scalar::I16 => write_typed(path, chunks.map(|c| i16::from_le_bytes(arr(c)))),
        Scalar::I32 => write_typed(path, chunks.map(|c| i32::from_le_bytes(arr(c)))),
        Scalar::I64 => write_typed(path, chunks.map(|c| i64::from_le_bytes(arr(c)))),
        Scalar::U8 => write_typed(path, chunks.map(|c| c[0])),
        Scalar::U16 => write_typed(path, chunks.map(|c| u16::from_le_bytes(arr(c)))),
        Scalar::U32 => write_typed(path, chunks.map(|c| u32::from_le_bytes(arr(c)))),
        Scalar::U64 => write_typed(path, chunks.map(|c| u64::from_le_bytes(arr(c)))),
        Scalar::F16 => write_typed(path, chunks.map(|c| half::f16::from_le_bytes(arr(c)))),
        Scalar::F32 => write_typed(path, chunks.map(|c| f32::from_le_bytes(arr(c)))),
        Scalar::F64 => write_typed(path, chunks.map(|c| f64::from_le_bytes(arr(c)))),
        Scalar::BF16 => return Err(NO_BF16.to_string()),
    };
    res.map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

fn arr<const N: usize>(c: &[u8]) -> [u8; N] {
    c.try_into().expect("chunk of the element size")
}

fn write_typed<T: npyz::AutoSerialize>(
    path: &Path,
    values: impl ExactSizeIterator<Item = T>,
) -> std::io::Result<()> {
    let file = BufWriter::new(File::create(path)?);
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[values.len() as u64])
        .writer(file)
        .begin_nd()?;
    w.extend(values)?;
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scalar_round_trips() {
        let dir = std::env::temp_dir().join(format!("kiln-npy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for elem in Scalar::ALL.into_iter().filter(|&s| s != Scalar::BF16) {
            let size = elem.size_bytes();
            let mut bytes: Vec<u8> = (0..3 * size as u8).collect();
            if elem == Scalar::Bool {
                bytes = vec![1, 0, 1];
            }
            let path = dir.join(format!("{elem}.npy"));
            write(&path, elem, &bytes).unwrap();
            assert_eq!(read(&path, elem).unwrap(), bytes, "{elem}");
            let other = if elem == Scalar::F32 { Scalar::F64 } else { Scalar::F32 };
            let err = read(&path, other).unwrap_err();
            assert!(err.contains(numpy_name(elem)) && err.contains(numpy_name(other)), "{err}");
        }
        let err = read(&dir.join("missing.npy"), Scalar::F32).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
        std::fs::write(dir.join("junk.npy"), b"not numpy").unwrap();
        let err = read(&dir.join("junk.npy"), Scalar::F32).unwrap_err();
        assert!(err.contains("not a valid .npy"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A version-1 `.npy` file with the given header dict and data bytes.
    pub(crate) fn npy_bytes(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut header = dict.to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    /// Issue 12, item 6: shape (2^62 + 1, 4) has 2^64 + 4 elements, which wraps to 4 in 64
    /// bits; it was accepted and loaded 4 elements. Now refused, as NumPy refuses it; so are
    /// shapes that do not match the data and huge shapes that would allocate absurdly.
    #[test]
    fn npy_shape_product_overflow_is_refused() {
        let dir = std::env::temp_dir().join(format!("kiln-npy-shape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = [0u8; 16];
        let cases = [
            ("(4611686018427387905, 4)", "overflows 64 bits"),
            ("(3,)", "holds 16 bytes"),
            ("(5,)", "holds 16 bytes"),
            ("(1000000000000, 1000000)", "holds 16 bytes"),
        ];
        for (shape, want) in cases {
            let path = dir.join("a.npy");
            let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
            std::fs::write(&path, npy_bytes(&dict, &data)).unwrap();
            let err = read(&path, Scalar::F32).unwrap_err();
            assert!(err.contains(want), "{shape}: {err}");
        }
        // Issue 29, C2: 13 bytes whose header length is 0xffffffff made npyz allocate 4 GiB.
        let mut forged = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
        forged.push(b'{');
        assert_eq!(forged.len(), 13);
        std::fs::write(dir.join("forged.npy"), &forged).unwrap();
        let err = read(&dir.join("forged.npy"), Scalar::F32).unwrap_err();
        assert!(
            err.contains("header would end at byte 4294967307") && err.contains("13 bytes"),
            "{err}"
        );
        let ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
        std::fs::write(dir.join("b.npy"), npy_bytes(ok, &data)).unwrap();
        assert_eq!(read(&dir.join("b.npy"), Scalar::F32).unwrap(), data);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
