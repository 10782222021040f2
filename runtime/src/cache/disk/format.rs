//! The persistent cache's file formats: the full key (`<n>.src`), the artifact file
//! (`<n>.bin`), the key's hashes, and the lean readers of the hit path.
//!
//! ```text
//! <n>.src  "KILNSRC3", 4 × (length u64, bytes): device, image, spec constants, build
//!          options; the artifact's length u64 and MAC; the MAC of everything before it
//! <n>.bin  "KILNBIN3", the artifact's length u64 and MAC, the artifact
//! ```
//!
//! Integers are little-endian; MACs are [`super::mac`]'s, 32 bytes.

use std::fs::File;
use std::io::{self, Read};

use super::mac::{Domain, MacKey, MAC_LEN};
use crate::cache::hash::hash64;

// Version 3: every item authenticated by a keyed MAC (version 2 had checksums anyone could
// recompute; version 1 FNV-1a ones). Items of earlier versions read as damaged and are
// rebuilt, never trusted.
const SRC_MAGIC: &[u8; 8] = b"KILNSRC3";
const BIN_MAGIC: &[u8; 8] = b"KILNBIN3";

/// The length of a `.bin` file's header: magic, length, MAC.
pub(super) const BIN_HEADER: usize = 16 + MAC_LEN;

/// A `.src` file's contents once its MAC checks out: the key, and the length and MAC of
/// the artifact it belongs to.
pub(super) type Decoded = (DiskKey, u64, [u8; MAC_LEN]);

/// The full key of a persistent-cache item.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DiskKey {
    /// Everything about the device that changes the artifact: kind, name, driver version,
    /// kiln's version and codegen stamp.
    pub device: String,
    /// The device image used as build input (kiln: the module's canonical text).
    pub image: Vec<u8>,
    /// Serialized specialization-constant values.
    pub spec_consts: Vec<u8>,
    /// All build options (API and environment).
    pub build_options: String,
}

impl DiskKey {
    /// The size of this key's `.src` file.
    pub(super) fn encoded_len(&self) -> usize {
        let parts = self.device.len()
            + self.image.len()
            + self.spec_consts.len()
            + self.build_options.len();
        SRC_MAGIC.len() + 4 * 8 + parts + 8 + 2 * MAC_LEN
    }

    /// The `.src` file of this key for an artifact of `bin_len` bytes whose MAC is
    /// `bin_mac`, authenticated by `mac`.
    pub(super) fn encode(&self, bin_len: u64, bin_mac: &[u8; MAC_LEN], mac: &MacKey) -> Vec<u8> {
        let mut out = SRC_MAGIC.to_vec();
        for part in
            [self.device.as_bytes(), &self.image, &self.spec_consts, self.build_options.as_bytes()]
        {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&bin_len.to_le_bytes());
        out.extend_from_slice(bin_mac);
        let tag = mac.tag(Domain::Src, &out);
        out.extend_from_slice(&tag);
        out
    }

    /// Parses a `.src` file whose MAC `mac` verifies: the key, the `.bin` length and MAC.
    pub(super) fn decode(bytes: &[u8], mac: &MacKey) -> Result<Decoded, String> {
        let body = src_body(bytes)?;
        if !mac.verify(Domain::Src, body, &bytes[body.len()..]) {
            return Err(NOT_AUTHENTIC.into());
        }
        Self::parse(body)
    }

    /// Parses a `.src` file without authenticating it (for showing what an item that does
    /// not authenticate claims to be; never for loading).
    pub(super) fn decode_unauthenticated(bytes: &[u8]) -> Result<Decoded, String> {
        Self::parse(src_body(bytes)?)
    }

    fn parse(body: &[u8]) -> Result<Decoded, String> {
        let mut pos = 8;
        let mut parts = Vec::new();
        for _ in 0..4 {
            let len = u64_at(body, pos).ok_or("truncated")? as usize;
            pos += 8;
            let end = pos.checked_add(len).filter(|&e| e <= body.len()).ok_or("truncated")?;
            parts.push(body[pos..end].to_vec());
            pos = end;
        }
        let bin_len = u64_at(body, pos).ok_or("truncated")?;
        let bin_mac = body.get(pos + 8..pos + 8 + MAC_LEN).ok_or("truncated")?;
        let bin_mac: [u8; MAC_LEN] = bin_mac.try_into().map_err(|_| "truncated")?;
        if pos + 8 + MAC_LEN != body.len() {
            return Err("trailing bytes".into());
        }
        let text = |v: Vec<u8>| String::from_utf8(v).map_err(|_| "a text field is not UTF-8");
        let mut it = parts.into_iter();
        let mut next = || it.next().unwrap_or_default();
        let key = DiskKey {
            device: text(next())?,
            image: next(),
            spec_consts: next(),
            build_options: text(next())?,
        };
        Ok((key, bin_len, bin_mac))
    }
}

/// Why an item whose MAC fails is refused.
pub(super) const NOT_AUTHENTIC: &str =
    "not authenticated: its MAC does not match this cache's key (edited, or written \
     without the key)";

/// The part of a `.src` file its MAC covers, once the magic is right.
fn src_body(bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < SRC_MAGIC.len() + MAC_LEN || &bytes[..8] != SRC_MAGIC {
        return Err("not a kiln cache key file of this version (bad magic)".into());
    }
    Ok(&bytes[..bytes.len() - MAC_LEN])
}

/// The hashes of a [`DiskKey`]'s parts, which name its item directory. Compute them once
/// per key ([`KeyHashes::of`]) and pass them to [`PersistentCache::get_hashed`](super::PersistentCache::get_hashed) /
/// [`PersistentCache::put_hashed`](super::PersistentCache::put_hashed) to look the key up without hashing it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHashes {
    /// Hash of [`DiskKey::device`].
    pub device: u64,
    /// Hash of [`DiskKey::image`].
    pub image: u64,
    /// Hash of [`DiskKey::spec_consts`].
    pub spec_consts: u64,
    /// Hash of [`DiskKey::build_options`].
    pub build_options: u64,
}

impl KeyHashes {
    /// The hashes of the parts given separately (what [`KeyHashes::of`] hashes).
    pub fn of_parts(device: &[u8], image: &[u8], spec_consts: &[u8], options: &[u8]) -> Self {
        KeyHashes {
            device: hash64(device),
            image: hash64(image),
            spec_consts: hash64(spec_consts),
            build_options: hash64(options),
        }
    }

    /// The hashes of `key`'s parts.
    pub fn of(key: &DiskKey) -> KeyHashes {
        Self::of_parts(
            key.device.as_bytes(),
            &key.image,
            &key.spec_consts,
            key.build_options.as_bytes(),
        )
    }
}

pub(super) fn u64_at(b: &[u8], pos: usize) -> Option<u64> {
    let s = b.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

/// The `.bin` file of `payload` and the payload's MAC (which its `.src` records).
pub(super) fn encode_bin(payload: &[u8], mac: &MacKey) -> (Vec<u8>, [u8; MAC_LEN]) {
    let tag = mac.tag(Domain::Bin, payload);
    let mut out = Vec::with_capacity(BIN_HEADER + payload.len());
    out.extend_from_slice(BIN_MAGIC);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&tag);
    out.extend_from_slice(payload);
    (out, tag)
}

/// Checks a `.bin` file against the length and MAC its `.src` records; `mac` `None`
/// checks the structure only (for showing an item that does not authenticate).
pub(super) fn decode_bin<'a>(
    bytes: &'a [u8],
    len: u64,
    tag: &[u8; MAC_LEN],
    mac: Option<&MacKey>,
) -> Result<&'a [u8], String> {
    if bytes.len() < BIN_HEADER {
        return Err("not a kiln cache binary (truncated header)".into());
    }
    let (header, payload) = bytes.split_at(BIN_HEADER);
    let have = payload.len() as u64;
    if have < len {
        return Err(format!("truncated: {have} of {len} bytes"));
    }
    if have > len {
        return Err(format!("length mismatch: {have} bytes where {len} are expected"));
    }
    check_bin(header, payload, len, tag, mac).map(|()| payload)
}

/// Checks a `.bin` file's header and payload (read separately) against its `.src`: the
/// length, and with `mac` the payload's MAC.
pub(super) fn check_bin(
    header: &[u8],
    payload: &[u8],
    len: u64,
    tag: &[u8; MAC_LEN],
    mac: Option<&MacKey>,
) -> Result<(), String> {
    if header.get(..8) != Some(&BIN_MAGIC[..]) {
        return Err("not a kiln cache binary of this version (bad magic)".into());
    }
    // The header's length and the key file's must agree (the payload was read, or
    // checked, at the key file's length: comparing against it would say "N of N").
    let recorded = u64_at(header, 8).unwrap_or(0);
    if recorded != len {
        return Err(format!(
            "length mismatch: the artifact header records {recorded} bytes, the key file {len}"
        ));
    }
    if payload.len() as u64 != len {
        return Err(format!("truncated: {} of {len} bytes", payload.len()));
    }
    // The header's copy of the MAC must be the one the key file authenticates; only then is
    // the payload hashed (a swapped-in artifact is refused without reading the key again).
    if header.get(16..BIN_HEADER) != Some(&tag[..]) {
        return Err("not authenticated: the artifact is not the one its key file names".into());
    }
    match mac {
        Some(m) if !m.verify(Domain::Bin, payload, tag) => Err(NOT_AUTHENTIC.into()),
        _ => Ok(()),
    }
}

/// The largest artifact a key file may announce (a bound against damaged lengths).
pub(super) const MAX_ARTIFACT: usize = 1 << 34;

/// Reads a key file expected to be `expected` bytes long in one `read` (a buffer one byte
/// longer sees a longer file); a longer file is read to its end.
pub(super) fn read_key_file(f: &mut File, expected: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; expected + 1];
    let n = f.read(&mut buf)?;
    if n == buf.len() {
        f.read_to_end(&mut buf)?;
    } else {
        buf.truncate(n);
    }
    Ok(buf)
}

/// Fills `a` then `b` from `f`, in one vectored read when the file allows.
pub(super) fn read_exact_two(f: &mut File, a: &mut [u8], b: &mut [u8]) -> io::Result<()> {
    let n = f.read_vectored(&mut [io::IoSliceMut::new(a), io::IoSliceMut::new(b)])?;
    if n < a.len() {
        f.read_exact(&mut a[n..])?;
        f.read_exact(b)
    } else {
        f.read_exact(&mut b[n - a.len()..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_len_is_exact() {
        let k = DiskKey {
            device: "dev".into(),
            image: b"kernel k() {}".to_vec(),
            spec_consts: vec![1, 2, 3],
            build_options: "-O0".into(),
        };
        let mac = MacKey::from_bytes([7; 32]);
        let bytes = k.encode(5, &[6; MAC_LEN], &mac);
        assert_eq!(bytes.len(), k.encoded_len());
        assert_eq!(DiskKey::decode(&bytes, &mac), Ok((k, 5, [6; MAC_LEN])));
    }

    /// A file written under another key, or re-sealed with a public hash, is refused;
    /// flipping any byte of either file is caught.
    #[test]
    fn only_the_key_authenticates() {
        let k = DiskKey {
            device: "dev".into(),
            image: b"kernel k() {}".to_vec(),
            spec_consts: vec![],
            build_options: String::new(),
        };
        let (mine, theirs) = (MacKey::from_bytes([1; 32]), MacKey::from_bytes([2; 32]));
        let payload = b"machine code".to_vec();
        let (bin, tag) = encode_bin(&payload, &mine);
        let src = k.encode(payload.len() as u64, &tag, &mine);
        assert!(DiskKey::decode(&src, &mine).is_ok());
        assert_eq!(decode_bin(&bin, payload.len() as u64, &tag, Some(&mine)), Ok(&payload[..]));
        assert_eq!(DiskKey::decode(&src, &theirs).unwrap_err(), NOT_AUTHENTIC);
        let (their_bin, their_tag) = encode_bin(&payload, &theirs);
        let e = decode_bin(&their_bin, payload.len() as u64, &their_tag, Some(&mine));
        assert_eq!(e.unwrap_err(), NOT_AUTHENTIC);
        for i in 0..src.len() {
            let mut s = src.clone();
            s[i] ^= 1;
            assert!(DiskKey::decode(&s, &mine).is_err(), "src byte {i}");
        }
        for i in 0..bin.len() {
            let mut b = bin.clone();
            b[i] ^= 1;
            assert!(decode_bin(&b, payload.len() as u64, &tag, Some(&mine)).is_err(), "bin {i}");
        }
    }
}
