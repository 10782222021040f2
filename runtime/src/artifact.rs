//! The program binary of the GPU devices: device code plus the kernels' signatures.
//!
//! A program binary must be loadable on its own, possibly by another process reading it
//! from the persistent cache, so besides the device code (PTX text, SPIR-V words) it
//! carries what a launch checks its arguments against: each kernel's name, typed
//! parameters and required work-group size (the other attributes do not affect a launch
//! and are not kept). They are encoded in binary, since parsing kiln text on every load
//! would cost as much as the rest of a persistent-cache hit. Layout, little-endian, strings
//! as (u32 len, UTF-8):
//!
//! ```text
//! "KILNART2"  u32 kernels, each: name; u8 has_reqd, [3 × u32 reqd_work_group_size];
//!                                u32 params, each: name; u8 type (see `put_type`)
//!             u32 blobs, each: name; u32 len, bytes
//! ```
//!
//! Decoding checks every length against the input: a damaged binary is a typed error,
//! never a panic or an out-of-bounds read.

use kiln_ir::{AddrSpace, Attrs, Kernel, Scalar, Stmt, Type, Var};

use crate::error::DeviceError;

const MAGIC: &[u8; 8] = b"KILNART2";

/// A decoded program binary.
#[derive(Debug)]
pub(crate) struct Artifact {
    /// The kernels' signatures (empty bodies), in module order.
    pub signatures: Vec<Kernel>,
    /// Named pieces of device code.
    pub blobs: Vec<(String, Vec<u8>)>,
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// One byte: bit 7 set for a pointer, bits 4..6 its address space (index in
/// `AddrSpace::ALL`), bits 0..3 the scalar (index in `Scalar::ALL`).
fn type_code(t: Type) -> u8 {
    let scalar = |s: Scalar| Scalar::ALL.iter().position(|x| *x == s).unwrap_or(0xf) as u8;
    match t {
        Type::Scalar(s) => scalar(s),
        Type::Ptr(a, s) => {
            let a = AddrSpace::ALL.iter().position(|x| *x == a).unwrap_or(7) as u8;
            0x80 | (a << 4) | scalar(s)
        }
        // Never a parameter's type (the verifier refuses vector and fragment parameters): a
        // code that reads back as no type, so a damaged signature is refused, not misread.
        Type::Vector(..) | Type::Frag(_) => 0x7f,
    }
}

fn type_of(code: u8) -> Option<Type> {
    let s = *Scalar::ALL.get((code & 0xf) as usize)?;
    if code & 0x80 == 0 {
        return (code & 0x70 == 0).then_some(Type::Scalar(s));
    }
    Some(Type::Ptr(*AddrSpace::ALL.get(((code >> 4) & 7) as usize)?, s))
}

/// Encodes the signatures of `kernels` and the blobs.
pub(crate) fn encode(kernels: &[Kernel], blobs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(kernels.len() as u32).to_le_bytes());
    for k in kernels {
        put(&mut out, k.name().as_bytes());
        match k.attrs().reqd_work_group_size {
            Some(r) => {
                out.push(1);
                r.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(k.params().len() as u32).to_le_bytes());
        for p in k.params() {
            put(&mut out, p.name().as_bytes());
            out.push(type_code(p.ty()));
        }
    }
    out.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    for (name, bytes) in blobs {
        put(&mut out, name.as_bytes());
        put(&mut out, bytes);
    }
    out
}

fn read_signature(r: &mut Reader<'_>) -> Result<Kernel, String> {
    let name = r.str()?.to_string();
    let reqd = match r.take(1)?[0] {
        0 => None,
        1 => Some([r.u32()?, r.u32()?, r.u32()?]),
        b => return Err(format!("kernel `{name}`: bad attribute flag {b}")),
    };
    let n = r.u32()?;
    let mut params = Vec::new();
    for _ in 0..n {
        let pname = r.str()?.to_string();
        let code = r.take(1)?[0];
        let ty = type_of(code).ok_or_else(|| format!("`{pname}`: bad type code {code:#x}"))?;
        params.push(Var::new(pname, ty));
    }
    let attrs = Attrs { reqd_work_group_size: reqd, ..Attrs::default() };
    Ok(Kernel::with_attrs(name, params, attrs, Stmt::block([])))
}

/// A reader over a byte slice whose every read is bounds-checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("truncated: {n} bytes wanted, {} left", self.bytes.len()));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, String> {
        std::str::from_utf8(self.bytes()?).map_err(|e| e.to_string())
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Decodes a binary made by [`encode`]; errors are [`DeviceError::Load`] for `device`.
pub(crate) fn decode(device: &str, bytes: &[u8]) -> Result<Artifact, DeviceError> {
    let fail = |message: String| DeviceError::Load { device: device.into(), message };
    let mut r = Reader::new(bytes);
    if r.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
        return Err(fail("not a kiln program binary (bad magic)".into()));
    }
    let kernels = r.u32().map_err(&fail)?;
    let mut signatures = Vec::new();
    for _ in 0..kernels {
        signatures.push(read_signature(&mut r).map_err(|e| fail(format!("signatures: {e}")))?);
    }
    let count = r.u32().map_err(&fail)? as usize;
    let mut blobs = Vec::new();
    for _ in 0..count {
        let name = r.str().map_err(&fail)?.to_string();
        let data = r.bytes().map_err(&fail)?.to_vec();
        blobs.push((name, data));
    }
    if !r.is_empty() {
        return Err(fail("trailing bytes after the last blob".into()));
    }
    Ok(Artifact { signatures, blobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = kiln_ir::parse_module(
            "kernel k(x: ptr<global, f32>, n: u32) #reqd_work_group_size(4, 1, 1) { x[0] = 1.0; }",
        );
        let m = m.unwrap();
        let bin = encode(&m.kernels, &[("ptx".into(), b"code".to_vec())]);
        let a = decode("d", &bin).unwrap();
        assert_eq!(a.signatures.len(), 1);
        assert_eq!(a.signatures[0].params(), m.kernels[0].params());
        assert_eq!(a.signatures[0].attrs(), m.kernels[0].attrs());
        assert_eq!(a.blobs, [("ptx".to_string(), b"code".to_vec())]);
        assert_eq!(a.signatures[0].name(), "k");
        // Every truncation, and a corrupted magic, is an error, never a panic.
        for n in 0..bin.len() {
            assert!(decode("d", &bin[..n]).is_err(), "truncated to {n} decoded");
        }
        let mut bad = bin.clone();
        bad[0] ^= 1;
        assert!(matches!(decode("d", &bad), Err(DeviceError::Load { .. })));
    }

    #[test]
    fn every_type_round_trips() {
        let mut types: Vec<Type> = Scalar::ALL.iter().map(|&s| Type::Scalar(s)).collect();
        for a in AddrSpace::ALL {
            types.extend(Scalar::ALL.iter().map(|&s| Type::Ptr(a, s)));
        }
        for t in types {
            assert_eq!(type_of(type_code(t)), Some(t), "{t}");
        }
        assert_eq!(type_of(0x0f), None);
        assert_eq!(type_of(0x10), None);
    }
}
