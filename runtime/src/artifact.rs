//! The program binary of the GPU devices: device code plus the kernels' signatures.
//!
//! A program binary must be loadable on its own, possibly by another process reading it
//! from the persistent cache, so besides the device code (PTX text, SPIR-V words) it
//! carries what a launch checks its arguments against: each kernel's name, typed
//! parameters and attributes. These travel as kiln text of the kernels with empty bodies
//! (the printer and parser already round-trip that exactly). Layout, little-endian:
//!
//! ```text
//! "KILNART1"  u32 len, signatures (UTF-8 .kir text)
//!             u32 count, then count × (u32 len, name; u32 len, bytes)
//! ```
//!
//! Decoding checks every length against the input: a damaged binary is a typed error,
//! never a panic or an out-of-bounds read.

use kiln_ir::{parse_module, Kernel, Module, Stmt};

use crate::error::DeviceError;

const MAGIC: &[u8; 8] = b"KILNART1";

/// A decoded program binary.
#[derive(Debug)]
pub(crate) struct Artifact {
    /// The kernels' signatures (empty bodies), in module order.
    pub signatures: Vec<Kernel>,
    /// Named pieces of device code.
    pub blobs: Vec<(String, Vec<u8>)>,
}

/// `k` with an empty body: what a launch needs to check its arguments.
pub(crate) fn signature(k: &Kernel) -> Kernel {
    Kernel::with_attrs(k.name(), k.params().to_vec(), k.attrs().clone(), Stmt::block([]))
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Encodes the signatures of `kernels` and the blobs.
pub(crate) fn encode(kernels: &[Kernel], blobs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let sigs = Module::new(kernels.iter().map(signature).collect()).to_string();
    let mut out = MAGIC.to_vec();
    put(&mut out, sigs.as_bytes());
    out.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    for (name, bytes) in blobs {
        put(&mut out, name.as_bytes());
        put(&mut out, bytes);
    }
    out
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
    let sigs = r.str().map_err(|e| fail(format!("signatures: {e}")))?;
    let signatures =
        parse_module(sigs).map_err(|d| fail(format!("signatures do not parse: {d}")))?.kernels;
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

/// The kernels `module` builds into under `options`: each verified, then optimized by the
/// default `-O` pipeline unless the options say `-O0`. Unknown options are an error (a
/// typo must not silently build something else, or split the cache).
pub(crate) fn prepare_kernels(
    device: &str,
    module: &Module,
    options: &str,
) -> Result<Vec<Kernel>, DeviceError> {
    let fail = |message: String| DeviceError::Build { device: device.into(), message };
    let mut optimize = true;
    for o in options.split_whitespace() {
        match o {
            "-O0" => optimize = false,
            "-O" | "-O1" | "-O2" | "-O3" => optimize = true,
            other => {
                return Err(fail(format!(
                    "unknown build option `{other}` (known: -O0, -O, -O1, -O2, -O3)"
                )))
            }
        }
    }
    let mut out = Vec::with_capacity(module.kernels.len());
    for k in &module.kernels {
        if let Err(errs) = kiln_ir::verify_kernel(k) {
            let first = errs.first().map(|e| e.to_string()).unwrap_or_default();
            return Err(fail(format!("kernel `{}` does not verify: {first}", k.name())));
        }
        if optimize {
            let o = kiln_passes::pipeline::try_optimize(k)
                .map_err(|e| fail(format!("kernel `{}`: optimizer: {e}", k.name())))?;
            out.push(o);
        } else {
            out.push(k.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = parse_module(
            "kernel k(x: ptr<global, f32>, n: u32) #reqd_work_group_size(4, 1, 1) { x[0] = 1.0; }",
        );
        let m = m.unwrap();
        let bin = encode(&m.kernels, &[("ptx".into(), b"code".to_vec())]);
        let a = decode("d", &bin).unwrap();
        assert_eq!(a.signatures.len(), 1);
        assert_eq!(a.signatures[0].params(), m.kernels[0].params());
        assert_eq!(a.signatures[0].attrs(), m.kernels[0].attrs());
        assert_eq!(a.blobs, [("ptx".to_string(), b"code".to_vec())]);
        // Every truncation, and a corrupted magic, is an error, never a panic.
        for n in 0..bin.len() {
            assert!(decode("d", &bin[..n]).is_err(), "truncated to {n} decoded");
        }
        let mut bad = bin.clone();
        bad[0] ^= 1;
        assert!(matches!(decode("d", &bad), Err(DeviceError::Load { .. })));
    }

    #[test]
    fn options() {
        let m = parse_module("kernel k(x: ptr<global, u32>) { x[0] = 1 + 2; }").unwrap();
        assert!(prepare_kernels("d", &m, "-O0").is_ok());
        assert!(prepare_kernels("d", &m, " -O  ").is_ok());
        let e = prepare_kernels("d", &m, "-O0 --fast").unwrap_err();
        assert!(e.to_string().contains("unknown build option `--fast`"), "{e}");
    }
}
