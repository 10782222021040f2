//! The persistent cache's file formats: the full key (`<n>.src`), the artifact file
//! (`<n>.bin`), the key's hashes, and the lean readers of the hit path.

use std::fs::File;
use std::io::{self, Read};

use crate::cache::hash::hash64;

// Version 2: checksums and directory names by `hash64` (version 1 used FNV-1a; its items
// read as damaged and are rebuilt).
const SRC_MAGIC: &[u8; 8] = b"KILNSRC2";
const BIN_MAGIC: &[u8; 8] = b"KILNBIN2";

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
        SRC_MAGIC.len() + 4 * 8 + parts + 16 + 8
    }

    pub(super) fn encode(&self, bin_len: u64, bin_sum: u64) -> Vec<u8> {
        let mut out = SRC_MAGIC.to_vec();
        for part in
            [self.device.as_bytes(), &self.image, &self.spec_consts, self.build_options.as_bytes()]
        {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&bin_len.to_le_bytes());
        out.extend_from_slice(&bin_sum.to_le_bytes());
        let sum = hash64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parses a `.src` file: the key, the `.bin` length and checksum.
    pub(super) fn decode(bytes: &[u8]) -> Result<(DiskKey, u64, u64), String> {
        if bytes.len() < SRC_MAGIC.len() + 8 || &bytes[..8] != SRC_MAGIC {
            return Err("not a kiln cache key file (bad magic)".into());
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if hash64(body) != u64_at(sum, 0).unwrap_or(0) {
            return Err("checksum mismatch".into());
        }
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
        let bin_sum = u64_at(body, pos + 8).ok_or("truncated")?;
        if pos + 16 != body.len() {
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
        Ok((key, bin_len, bin_sum))
    }
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

pub(super) fn encode_bin(payload: &[u8]) -> Vec<u8> {
    let mut out = BIN_MAGIC.to_vec();
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&hash64(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks a `.bin` file against the length and checksum its `.src` records.
pub(super) fn decode_bin(bytes: &[u8], len: u64, sum: u64) -> Result<&[u8], String> {
    if bytes.len() < 24 {
        return Err("not a kiln cache binary (truncated header)".into());
    }
    let (header, payload) = bytes.split_at(24);
    let have = payload.len() as u64;
    if have < len {
        return Err(format!("truncated: {have} of {len} bytes"));
    }
    if have > len {
        return Err(format!("length mismatch: {have} bytes where {len} are expected"));
    }
    check_bin(header, payload, len, sum).map(|()| payload)
}

/// Checks a `.bin` file's header and payload (read separately) against its `.src`.
pub(super) fn check_bin(header: &[u8], payload: &[u8], len: u64, sum: u64) -> Result<(), String> {
    if header.get(..8) != Some(&BIN_MAGIC[..]) {
        return Err("not a kiln cache binary (bad magic)".into());
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
    if u64_at(header, 16) != Some(sum) || hash64(payload) != sum {
        return Err("checksum mismatch".into());
    }
    Ok(())
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
        let bytes = k.encode(5, 6);
        assert_eq!(bytes.len(), k.encoded_len());
        assert_eq!(DiskKey::decode(&bytes), Ok((k, 5, 6)));
    }
}
