//! A small, stable, dependency-free hash (FNV-1a, 64 bits) for on-disk names and checksums.
//!
//! Stable across builds and platforms (unlike `std`'s `DefaultHasher`), which is what a
//! persistent cache's directory names and checksums need. It is not cryptographic: the cache
//! never trusts a hash alone (full keys are compared; see [`super::disk`]).

/// FNV-1a over `bytes`, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_continue(0xcbf2_9ce4_8422_2325, bytes)
}

/// Continues an FNV-1a hash from state `h`.
pub fn fnv1a64_continue(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A hash of several byte strings, each length-prefixed so that ("ab","c") != ("a","bc").
pub fn hash_parts(parts: &[&[u8]]) -> u64 {
    let mut h = fnv1a64(&[]);
    for p in parts {
        h = fnv1a64_continue(h, &(p.len() as u64).to_le_bytes());
        h = fnv1a64_continue(h, p);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(hash_parts(&[b"ab", b"c"]), hash_parts(&[b"a", b"bc"]));
    }
}
