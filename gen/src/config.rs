//! [`GemmConfig`]: the knobs of a generated kernel, and the candidate list a tuner walks.

use std::fmt;

/// Most work-items in a work-group the generator emits (what every target kiln lowers to
/// allows).
pub const MAX_WORK_GROUP: u32 = 256;
/// Most local memory one work-group may use, in bytes (the smallest limit among kiln's
/// targets).
pub const MAX_LOCAL_BYTES: u32 = 32 * 1024;
/// Most slices a split-K kernel cuts the reduction into.
pub const MAX_SPLIT_K: u32 = 64;

/// How a GEMM-like kernel is blocked. The work-group computes a `wg_m * tm` by `wg_n * tn`
/// tile of C; each work-item a `tm` x `tn` register block, its rows `wg_m` apart and its
/// columns `wg_n` apart (so that neighbouring work-items touch neighbouring elements).
/// The reduction runs `k_tile` at a time through local memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmConfig {
    /// Work-items along M in a work-group (local dimension 1).
    pub wg_m: u32,
    /// Work-items along N in a work-group (local dimension 0).
    pub wg_n: u32,
    /// Rows of C per work-item (register block).
    pub tm: u32,
    /// Columns of C per work-item (register block).
    pub tn: u32,
    /// The reduction depth of one local-memory tile.
    pub k_tile: u32,
    /// Local-memory buffers per operand: 1 (load, barrier, compute, barrier), 2 (the next
    /// tile loads while the current one is multiplied; one barrier per step) or 3 (two
    /// tiles ahead: the single-buffered kernel through the `slm-buffer3` pass).
    pub slm_depth: u32,
    /// Fully unroll the constant-trip inner loops (tile loads, the `k_tile` loop) with the
    /// `unroll` pass.
    pub unroll: bool,
    /// Vector width, 1, 2, 4 or 8. Above 1, each work-item owns groups of `vec`
    /// contiguous rows and columns of C (`wg_m * vec` rows, `wg_n * vec` columns apart; a
    /// register block that `vec` does not divide is one contiguous group), reads each group
    /// from local memory with one `vload`, and the tile copies and C's stores use
    /// `vec`-lane vector accesses wherever the view is provably contiguous and aligned
    /// there (elsewhere scalar ones).
    pub vec: u32,
    /// Split-K: the reduction is cut into at most this many slices of whole `k_tile`s,
    /// each computed by its own work-groups into a workspace, and a second kernel adds the
    /// slices in slice order (see [`crate::codegen`]). 1: no split.
    pub split_k: u32,
}

impl Default for GemmConfig {
    fn default() -> GemmConfig {
        GemmConfig {
            wg_m: 8,
            wg_n: 8,
            tm: 2,
            tn: 2,
            k_tile: 8,
            slm_depth: 2,
            unroll: false,
            vec: 1,
            split_k: 1,
        }
    }
}

impl GemmConfig {
    /// Rows of C per work-group.
    pub fn tile_m(&self) -> u32 {
        self.wg_m * self.tm
    }

    /// Columns of C per work-group.
    pub fn tile_n(&self) -> u32 {
        self.wg_n * self.tn
    }

    /// Work-items per work-group.
    pub fn threads(&self) -> u32 {
        self.wg_m * self.wg_n
    }

    /// Local memory used, in bytes (f32 tiles).
    pub fn local_bytes(&self) -> u64 {
        let per = self.k_tile as u64 * (self.tile_m() as u64 + self.tile_n() as u64);
        per * self.slm_depth as u64 * 4
    }

    /// Checks the configuration's own limits (not the problem's): positive sizes, at most
    /// [`MAX_WORK_GROUP`] work-items, at most [`MAX_LOCAL_BYTES`] of local memory, register
    /// blocks of at most 128 accumulators with sides of at most 16 (8 x 16, 16 x 8), buffering depth 1, 2 or 3, split-K into 1 to [`MAX_SPLIT_K`]
    /// slices.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("wg_m", self.wg_m),
            ("wg_n", self.wg_n),
            ("tm", self.tm),
            ("tn", self.tn),
            ("k_tile", self.k_tile),
        ];
        if let Some((n, _)) = fields.iter().find(|(_, v)| *v == 0) {
            return Err(format!("config: {n} must be positive"));
        }
        if self.wg_m > MAX_WORK_GROUP
            || self.wg_n > MAX_WORK_GROUP
            || self.threads() > MAX_WORK_GROUP
        {
            return Err(format!(
                "config: a {}x{} work-group has more than {MAX_WORK_GROUP} work-items",
                self.wg_m, self.wg_n
            ));
        }
        if self.tm > 16 || self.tn > 16 || self.tm * self.tn > 128 {
            return Err(format!(
                "config: register block {}x{} exceeds 8x16 or 16x8 (128 accumulators, sides \
                 of at most 16)",
                self.tm, self.tn
            ));
        }
        if self.k_tile > 256 {
            return Err(format!("config: k_tile {} exceeds 256", self.k_tile));
        }
        if ![1, 2, 4, 8].contains(&self.vec) {
            return Err(format!("config: vec {} is not 1, 2, 4 or 8", self.vec));
        }
        if !(1..=3).contains(&self.slm_depth) {
            return Err(format!("config: slm_depth {} is not 1, 2 or 3", self.slm_depth));
        }
        if !(1..=MAX_SPLIT_K).contains(&self.split_k) {
            return Err(format!("config: split_k {} is not 1 to {MAX_SPLIT_K}", self.split_k));
        }
        if self.local_bytes() > MAX_LOCAL_BYTES as u64 {
            return Err(format!(
                "config: {} bytes of local memory exceed {MAX_LOCAL_BYTES}",
                self.local_bytes()
            ));
        }
        Ok(())
    }

    /// Whether the work-group tile and the k-tile do not exceed the problem by more than one
    /// step of the candidate grid (a 512-wide tile for a 3-wide matrix would be all masks).
    pub fn fits(&self, m: u64, n: u64, k: u64) -> bool {
        let fits = |tile: u32, size: u64| (tile as u64) < 2 * size.max(4);
        fits(self.tile_m(), m) && fits(self.tile_n(), n) && fits(self.k_tile, k)
    }

    /// Split-K slices of a reduction of `k`: [`GemmConfig::split_k`] at most, each a whole
    /// number of k-tiles, as few as cover `k` (what the generator emits).
    pub fn slices(&self, k: u64) -> u64 {
        let ktiles = k.max(1).div_ceil(self.k_tile.max(1) as u64);
        let per = ktiles.div_ceil(self.split_k.max(1) as u64);
        ktiles.div_ceil(per)
    }

    /// Every configuration a tuner should try for a GEMM of `m` x `n` x `k` (after the
    /// view flattening, so a convolution passes its implicit GEMM sizes): a grid of
    /// work-group shapes, register blocks, `k_tile`s, buffering depths and unrolling, kept
    /// when valid and when the work-group tile does not exceed the problem by more than
    /// one step of the grid (a 512-wide tile for a 3-wide matrix would be all masks).
    /// Deterministic order, most conservative first; never empty.
    pub fn candidates(m: u64, n: u64, k: u64) -> Vec<GemmConfig> {
        let mut out = Vec::new();
        for (wg_m, wg_n) in [(4, 4), (8, 8), (16, 16), (8, 16), (16, 8), (8, 32), (32, 8)] {
            for (tm, tn) in [
                (1, 1),
                (2, 1),
                (1, 2),
                (2, 2),
                (4, 1),
                (1, 4),
                (4, 4),
                (4, 2),
                (2, 4),
                (8, 4),
                (4, 8),
                (8, 8),
                (8, 16),
                (16, 8),
            ] {
                for k_tile in [4, 8, 16, 32] {
                    for slm_depth in [1, 2, 3] {
                        for (unroll, vec) in [(false, 1), (true, 1), (true, 4)] {
                            // Vectors where the register block can use them whole; the
                            // 128-accumulator blocks only unrolled with vectors (what
                            // measured well, at 0.95-0.99x cuBLAS on the H200).
                            if vec > 1 && (tm % vec != 0 || tn % vec != 0) {
                                continue;
                            }
                            if tm * tn > 64 && vec == 1 {
                                continue;
                            }
                            let c = GemmConfig {
                                wg_m,
                                wg_n,
                                tm,
                                tn,
                                k_tile,
                                slm_depth,
                                unroll,
                                vec,
                                split_k: 1,
                            };
                            if c.validate().is_ok() && c.fits(m, n, k) {
                                out.push(c);
                            }
                        }
                    }
                }
            }
        }
        if out.is_empty() {
            out.push(GemmConfig {
                wg_m: 4,
                wg_n: 4,
                tm: 1,
                tn: 1,
                k_tile: 4,
                slm_depth: 1,
                unroll: false,
                vec: 1,
                split_k: 1,
            });
        }
        out
    }
}

impl fmt::Display for GemmConfig {
    /// `wg=8x8 tile=2x2 k=8 slm=2 unroll=0 vec=1`, followed by ` split=N` when the
    /// reduction is split.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wg={}x{} tile={}x{} k={} slm={} unroll={} vec={}",
            self.wg_m,
            self.wg_n,
            self.tm,
            self.tn,
            self.k_tile,
            self.slm_depth,
            self.unroll as u8,
            self.vec
        )?;
        if self.split_k > 1 {
            write!(f, " split={}", self.split_k)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for GemmConfig {
    type Err = String;

    /// Parses the [`Display`](fmt::Display) form, `wg=8x8 tile=2x2 k=8 slm=2 unroll=0 vec=1`
    /// (every field, any order; `split=N` may be left out for 1), and validates it.
    fn from_str(s: &str) -> Result<GemmConfig, String> {
        let mut c = GemmConfig::default();
        let mut seen = Vec::new();
        let num = |v: &str, what: &str| {
            v.parse::<u32>().map_err(|_| format!("config: {what} `{v}` is not a number"))
        };
        let pair = |v: &str, what: &str| -> Result<(u32, u32), String> {
            let (a, b) = v.split_once('x').ok_or(format!("config: {what} `{v}` is not AxB"))?;
            Ok((num(a, what)?, num(b, what)?))
        };
        for word in s.split_whitespace() {
            let (key, v) =
                word.split_once('=').ok_or(format!("config: `{word}` is not key=value"))?;
            match key {
                "wg" => (c.wg_m, c.wg_n) = pair(v, key)?,
                "tile" => (c.tm, c.tn) = pair(v, key)?,
                "k" => c.k_tile = num(v, key)?,
                "slm" => c.slm_depth = num(v, key)?,
                "unroll" => c.unroll = num(v, key)? != 0,
                "vec" => c.vec = num(v, key)?,
                "split" => c.split_k = num(v, key)?,
                _ => return Err(format!("config: unknown key `{key}`")),
            }
            seen.push(key);
        }
        for key in ["wg", "tile", "k", "slm", "unroll", "vec"] {
            if !seen.contains(&key) {
                return Err(format!("config: `{key}=` is missing"));
            }
        }
        c.validate()?;
        Ok(c)
    }
}
