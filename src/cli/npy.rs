//! Reading and writing NumPy `.npy` files (through `npyz`) as little-endian element bytes.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use kiln::ir::Scalar;
use npyz::{DType, NpyFile, Order, TypeChar, TypeStr, WriterBuilder};

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
    }
    Ok(out)
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
        for elem in Scalar::ALL {
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
}
