//! The warpgroup (sm_90) tier of the matrix operations: products `D = A·B + D` of a
//! `64 x N x 16` tile by a **warpgroup** (128 work-items, 4 sub-groups) whose factors are read
//! straight from swizzled local memory, tile copies from global to local memory that complete
//! on a **barrier object** with a transaction count, and the barrier objects themselves.
//! The semantics defined here are what the interpreter runs; docs/matrix.md ("Warpgroup
//! operations") is the reference of the text form.
//!
//! * A warpgroup is work-items `128w .. 128w + 127` (linear local id); its accumulator
//!   `frag<acc, m64nNk16, f32>` is spread over them: each holds `N / 2` elements, element `i`
//!   of work-item `t` (its index in the warpgroup) being [`acc_coords`]`(t, i)`.
//!   `frag_elem(f, i)` reads one of them; that is how results leave an accumulator.
//! * A `wgmma` factor is K-major or MN-major ([`WgLayout`]).
//! * Local memory read by `wgmma` or written by `tma_load` is laid out in rows of the
//!   [`Swizzle`] span `S` bytes (128, 64 or 32): byte `L` of the tile (counted from the start
//!   of its local array) lives at [`Swizzle::apply`]`(L)`, which permutes the 16-byte chunks of
//!   each row by the row's index modulo 8 (`S / 16` chunks), exactly as the hardware does for
//!   arrays aligned to `8 S` bytes (the PTX backend aligns such arrays to 1024).
//! * A barrier object is one `u64` element of a local array. Its contents are the target's
//!   (the interpreter keeps its state there, [`Mbar`]); only the `mbar_*` operations and
//!   `tma_load` may touch it.

use std::fmt;

/// How the 16-byte chunks of each row of a tile in local memory are permuted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Swizzle {
    /// Rows as they are (text `noswizzle`); only `tma_load` takes it.
    None,
    /// 32-byte rows, chunk bit 0 ^= row bit 2 (text `sw32`).
    B32,
    /// 64-byte rows, chunk bits 0-1 ^= row bits 1-2 (text `sw64`).
    B64,
    /// 128-byte rows, chunk bits 0-2 ^= row bits 0-2 (text `sw128`).
    B128,
}

impl Swizzle {
    /// Every mode.
    pub const ALL: [Swizzle; 4] = [Swizzle::None, Swizzle::B32, Swizzle::B64, Swizzle::B128];

    /// The text-format name.
    pub fn name(self) -> &'static str {
        match self {
            Swizzle::None => "noswizzle",
            Swizzle::B32 => "sw32",
            Swizzle::B64 => "sw64",
            Swizzle::B128 => "sw128",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<Swizzle> {
        Swizzle::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The row length `S` in bytes (0 for [`Swizzle::None`]).
    pub fn span(self) -> u64 {
        match self {
            Swizzle::None => 0,
            Swizzle::B32 => 32,
            Swizzle::B64 => 64,
            Swizzle::B128 => 128,
        }
    }

    /// Bytes after which the pattern repeats (`8 S`; 16 for [`Swizzle::None`]).
    pub fn repeat(self) -> u64 {
        (8 * self.span()).max(16)
    }

    /// Where byte `l` of a tile lies: bits 4.. of the byte's 16-byte chunk index XORed with
    /// bits 7.. of `l` (1, 2 or 3 bits for 32, 64 and 128-byte rows).
    pub fn apply(self, l: u64) -> u64 {
        let bits = match self {
            Swizzle::None => return l,
            Swizzle::B32 => 1,
            Swizzle::B64 => 2,
            Swizzle::B128 => 3,
        };
        l ^ (((l >> 7) & ((1 << bits) - 1)) << 4)
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Work-items per warpgroup.
pub const WARPGROUP: u64 = 128;

/// The `(row, column)` of element `i` (`0 <= i < N / 2`) of a `frag<acc, m64nNk16, f32>` held
/// by work-item `t` (`0 <= t < 128`) of its warpgroup: with `w = t / 32` and `l = t % 32`,
/// row `16 w + l / 4 + 8 ((i / 2) % 2)`, column `8 (i / 4) + 2 (l % 4) + i % 2` (the
/// register order of PTX's `wgmma` accumulators).
pub fn acc_coords(t: u32, i: u32) -> (u32, u32) {
    let (w, l) = (t / 32, t % 32);
    (16 * w + l / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (l % 4) + i % 2)
}

/// How a `wgmma` factor lies in local memory: through which [`Swizzle`], and which of its
/// dimensions is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgLayout {
    /// The swizzle of the rows (never [`Swizzle::None`] for a `wgmma` factor).
    pub swizzle: Swizzle,
    /// Which dimension is contiguous.
    pub major: Major,
}

/// The contiguous dimension of a `wgmma` factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Major {
    /// K-major (text `sw128`): each M (or N) row holds its 16 k elements contiguously, rows
    /// `S` bytes apart.
    K,
    /// MN-major (text `sw128_mn<L>`): each k row holds `S` bytes of consecutive M (or N)
    /// elements, k rows `S` bytes apart; the next `S` bytes' worth of M (or N) elements lie
    /// `L` bytes further (the transposed layouts, PTX's `imm-trans` 1).
    Mn(u32),
}

impl WgLayout {
    /// A K-major layout through `swizzle`.
    pub fn k(swizzle: Swizzle) -> WgLayout {
        WgLayout { swizzle, major: Major::K }
    }

    /// An MN-major layout through `swizzle`, groups of `S` bytes of M (or N) elements
    /// `stride` bytes apart.
    pub fn mn(swizzle: Swizzle, stride: u32) -> WgLayout {
        WgLayout { swizzle, major: Major::Mn(stride) }
    }

    /// The text-format word (`sw128`, `sw128_mn8192`).
    pub fn name(self) -> String {
        match self.major {
            Major::K => self.swizzle.name().to_string(),
            Major::Mn(l) => format!("{}_mn{l}", self.swizzle.name()),
        }
    }

    /// Parses a text-format word.
    pub fn from_name(name: &str) -> Option<WgLayout> {
        match name.split_once("_mn") {
            None => Some(WgLayout::k(Swizzle::from_name(name)?)),
            Some((sw, l)) if !l.starts_with('+') => {
                Some(WgLayout::mn(Swizzle::from_name(sw)?, l.parse().ok()?))
            }
            _ => None,
        }
    }

    /// Why the layout cannot hold a `wgmma` factor, if it cannot: it is swizzled, and an
    /// MN-major stride is a positive multiple of the swizzle repeat below 256 KiB (what the
    /// descriptor's 14-bit field holds).
    pub fn check(self) -> Result<(), String> {
        let sw = self.swizzle;
        if sw.span() == 0 {
            return Err(format!("`wgmma` factors are swizzled (sw128, sw64 or sw32), not {sw}"));
        }
        if let Major::Mn(l) = self.major {
            let l = l as u64;
            if l == 0 || !l.is_multiple_of(sw.repeat()) || l >= 1 << 18 {
                return Err(format!(
                    "`{}`: the stride between MN groups must be a positive multiple of the \
                     {}-byte swizzle repeat below 262144 bytes",
                    self.name(),
                    sw.repeat()
                ));
            }
        }
        Ok(())
    }

    /// The element index (relative to its local array) of element `(r, k)` of a `wgmma`
    /// factor starting at element `start`, `r` its M (or N) index and `k` its k index
    /// (0..16): K-major, byte `r S + k size` of the tile; MN-major, byte
    /// `(r / E) L + k S + (r % E) size` with `E = S / size`; both through the swizzle.
    pub fn index(self, start: u64, r: u64, k: u64, elem_bytes: u64) -> u64 {
        let span = self.swizzle.span();
        let off = match self.major {
            Major::K => r * span + k * elem_bytes,
            Major::Mn(l) => {
                let e = span / elem_bytes;
                (r / e) * l as u64 + k * span + (r % e) * elem_bytes
            }
        };
        self.swizzle.apply(start * elem_bytes + off) / elem_bytes
    }

    /// Why a `wgmma` factor cannot start at element `start` (of `elem_bytes`-byte elements)
    /// of its local array, if it cannot. K-major: on a 16-byte boundary within the first row
    /// of a swizzle repeat, leaving room for 16 elements (a k step moves along the row).
    /// MN-major: on a swizzle-repeat boundary (a k step of 16 is two whole repeats).
    pub fn check_start(self, start: u64, elem_bytes: u64) -> Result<(), String> {
        let sw = self.swizzle;
        let b = start * elem_bytes;
        let in_row = b % sw.repeat();
        match self.major {
            Major::K if !b.is_multiple_of(16) || in_row + 16 * elem_bytes > sw.span() => {
                Err(format!(
                    "a K-major `wgmma` factor at element {start} (byte {b}) with {sw}: it must \
                     start on a 16-byte boundary within the first {} bytes of a {}-byte \
                     swizzle repeat, leaving room for 16 elements",
                    sw.span(),
                    sw.repeat()
                ))
            }
            Major::Mn(_) if in_row != 0 => Err(format!(
                "an MN-major `wgmma` factor at element {start} (byte {b}) with {sw}: it must \
                 start on a {}-byte swizzle-repeat boundary",
                sw.repeat()
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for WgLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The box one `tma_load` copies: `w` elements along a row of the tensor (contiguous in
/// global memory) by `h` rows, laid out in local memory as `h` rows of `w` elements through
/// `swizzle` (`w` times the element size is then the swizzle span).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TmaBox {
    /// Elements per row (1 to 256).
    pub w: u16,
    /// Rows (1 to 256).
    pub h: u16,
    /// The local-memory layout.
    pub swizzle: Swizzle,
}

impl TmaBox {
    /// Why the box is not allowed for elements of `elem_bytes` bytes, if it is not.
    pub fn check(self, elem_bytes: u64) -> Result<(), String> {
        let row = self.w as u64 * elem_bytes;
        if !(1..=256).contains(&self.w) || !(1..=256).contains(&self.h) {
            return Err(format!("a {}x{} box: each side is 1 to 256 elements", self.w, self.h));
        }
        match self.swizzle {
            Swizzle::None if !row.is_multiple_of(16) => Err(format!(
                "a box row of {row} bytes: without a swizzle rows are multiples of 16 bytes"
            )),
            Swizzle::None => Ok(()),
            s if row != s.span() => Err(format!(
                "a box row of {row} bytes with {s}: a swizzled row is exactly {} bytes",
                s.span()
            )),
            _ => Ok(()),
        }
    }

    /// Bytes the box moves (what it completes on its barrier).
    pub fn bytes(self, elem_bytes: u64) -> u64 {
        self.w as u64 * self.h as u64 * elem_bytes
    }
}

/// The interpreter's barrier object, kept in its `u64`: expected arrivals per phase (bits
/// 0-19), arrivals still pending in the current phase (bits 20-39), the transaction count
/// (bytes expected minus bytes completed, bits 40-61, two's complement) and the phase's
/// parity (bit 63). A phase completes when no arrival and no byte is pending; the next phase
/// then expects the same arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mbar {
    /// Arrivals per phase (0: never initialized).
    pub expected: u32,
    /// Arrivals the current phase still waits for.
    pub pending: u32,
    /// Bytes still to complete in the current phase (negative: completed before expected).
    pub tx: i64,
    /// The current phase's parity.
    pub phase: bool,
}

/// The most arrivals a barrier object may expect (`2^20 - 1`, as on PTX).
pub const MBAR_MAX_COUNT: u32 = (1 << 20) - 1;
const TX_BITS: u32 = 22;

impl Mbar {
    /// A barrier object that expects `count` arrivals per phase, in phase 0.
    pub fn new(count: u32) -> Mbar {
        Mbar { expected: count, pending: count, tx: 0, phase: false }
    }

    /// Decodes the `u64` the interpreter keeps.
    pub fn decode(w: u64) -> Mbar {
        let field = |at: u32, bits: u32| (w >> at) & ((1 << bits) - 1);
        let tx = field(40, TX_BITS) as i64;
        let tx = if tx >= 1 << (TX_BITS - 1) { tx - (1 << TX_BITS) } else { tx };
        Mbar {
            expected: field(0, 20) as u32,
            pending: field(20, 20) as u32,
            tx,
            phase: w >> 63 != 0,
        }
    }

    /// The `u64` the interpreter keeps.
    pub fn encode(self) -> u64 {
        let tx = (self.tx as u64) & ((1 << TX_BITS) - 1);
        (self.expected as u64) | (self.pending as u64) << 20 | tx << 40 | (self.phase as u64) << 63
    }

    /// True once the phase of parity `parity` has completed (the barrier's current phase has
    /// the other parity): what `mbar_wait` waits for.
    pub fn done(self, parity: bool) -> bool {
        self.phase != parity
    }

    fn settle(&mut self) {
        if self.pending == 0 && self.tx == 0 {
            self.phase = !self.phase;
            self.pending = self.expected;
        }
    }

    fn initialized(self) -> Result<(), String> {
        if self.expected == 0 {
            return Err("the barrier object was never initialized with `mbar_init`".into());
        }
        Ok(())
    }

    /// One arrival, after adding `bytes` to the transaction count.
    pub fn arrive(&mut self, bytes: u64) -> Result<(), String> {
        self.initialized()?;
        if self.pending == 0 {
            return Err("an arrival on a barrier object with no arrival pending".into());
        }
        self.tx_add(bytes as i64)?;
        self.pending -= 1;
        self.settle();
        Ok(())
    }

    /// `bytes` of a tile copy have landed.
    pub fn complete_tx(&mut self, bytes: u64) -> Result<(), String> {
        self.initialized()?;
        self.tx_add(-(bytes as i64))?;
        self.settle();
        Ok(())
    }

    fn tx_add(&mut self, d: i64) -> Result<(), String> {
        let t = self.tx + d;
        let lim = (1i64 << 20) - 1;
        if !(-lim..=lim).contains(&t) {
            return Err(format!(
                "the transaction count of a barrier object would reach {t} bytes (at most \
                 {lim} either way)"
            ));
        }
        self.tx = t;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swizzle_permutes_chunks_within_rows() {
        for sw in [Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            let n = sw.repeat();
            let mut seen: Vec<u64> = (0..n).map(|l| sw.apply(l)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "{sw} is a permutation");
            for l in 0..n {
                assert_eq!(sw.apply(l) / sw.span(), l / sw.span(), "{sw} keeps rows");
            }
        }
        // Row 1 of a 128-byte swizzle swaps its 16-byte chunks pairwise.
        assert_eq!(Swizzle::B128.apply(128), 144);
        assert_eq!(Swizzle::B128.apply(7 * 128 + 16), 7 * 128 + 96);
    }

    #[test]
    fn acc_coords_cover_the_tile_once() {
        let n = 24u32;
        let mut seen = vec![0u8; 64 * n as usize];
        for t in 0..128 {
            for i in 0..n / 2 {
                let (r, c) = acc_coords(t, i);
                seen[(r * n + c) as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
    }

    #[test]
    fn barrier_phases() {
        let mut b = Mbar::new(2);
        assert_eq!(Mbar::decode(b.encode()), b);
        b.arrive(4096).unwrap();
        assert!(!b.done(false));
        b.complete_tx(4096).unwrap();
        assert!(!b.done(false), "one arrival still pending");
        b.arrive(0).unwrap();
        assert!(b.done(false) && !b.done(true));
        let mut c = Mbar::decode(b.encode());
        c.complete_tx(16).unwrap();
        assert_eq!(Mbar::decode(c.encode()).tx, -16);
        assert!(Mbar::decode(0).arrive(0).is_err());
    }
}
