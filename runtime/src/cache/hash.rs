//! Small, stable, dependency-free hashes for on-disk names and in-memory keys.
//!
//! Stable across builds and platforms (unlike `std`'s `DefaultHasher`), which is what a
//! persistent cache's directory names need. They are not cryptographic and anyone can
//! recompute them, so they never prove anything: the cache compares full keys and
//! authenticates every item with a keyed MAC (see [`super::disk`]).

/// A fast, stable 64-bit hash for directory names and keys: one multiply per 8 bytes
/// (FNV-1a takes one per byte). Every step is a bijection of the state for a fixed input
/// word, so changing any one 8-byte word of the input always changes the hash; the length
/// is mixed in, and a finalizer spreads the bits. Stable across builds and platforms (little-endian words).
pub fn hash64(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(31);
    let mut h = 0x243f_6a88_85a3_08d3 ^ (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = step(h, u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = step(h, u64::from_le_bytes(last));
    }
    // splitmix64's finalizer.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

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

    #[test]
    fn hash64_sees_every_change() {
        let base: Vec<u8> = (0..100u8).collect();
        let h = hash64(&base);
        assert_eq!(h, hash64(&base.clone()), "deterministic");
        // Every single-byte change, every truncation and every appended zero changes it.
        for i in 0..base.len() {
            let mut v = base.clone();
            v[i] ^= 0x40;
            assert_ne!(hash64(&v), h, "byte {i}");
            assert_ne!(hash64(&base[..i]), h, "cut at {i}");
        }
        let mut longer = base.clone();
        longer.push(0);
        assert_ne!(hash64(&longer), h);
        assert_ne!(hash64(b""), hash64(&[0]));
    }
}
