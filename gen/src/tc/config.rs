//! The blocking of a tensor-core GEMM ([`TcConfig`]): its validity, local memory and the
//! candidates a tuner should try.

use std::fmt;

/// The most local memory a generated kernel uses: what an sm_90 work-group may use once the
/// launch opts in to dynamic shared memory past 48 KiB (the PTX backend's
/// `MAX_DYNAMIC_SHARED_BYTES`).
pub const MAX_LOCAL_BYTES: u32 = 227 * 1024;

/// Local memory a kernel may use as static shared memory on PTX (no launch setup).
const STATIC_LOCAL_BYTES: u32 = 48 * 1024;

/// The blocking of a tensor-core GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcConfig {
    /// Rows of C per work-group.
    pub bm: u32,
    /// Columns of C per work-group.
    pub bn: u32,
    /// Reduction depth of one local-memory tile (a multiple of 16).
    pub bk: u32,
    /// Warps along M.
    pub warps_m: u32,
    /// Warps along N.
    pub warps_n: u32,
    /// Local-memory slots of the ring (2 to 4): while one tile is multiplied, the next
    /// `stages - 1` are being copied.
    pub stages: u32,
}

impl Default for TcConfig {
    /// 128 x 128 x 32, 2 x 4 warps (each 64 x 32), two stages (static shared memory: no
    /// launch setup needed).
    fn default() -> TcConfig {
        TcConfig { bm: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 4, stages: 2 }
    }
}

impl fmt::Display for TcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block={}x{}x{} warps={}x{} stages={}",
            self.bm, self.bn, self.bk, self.warps_m, self.warps_n, self.stages
        )
    }
}

impl TcConfig {
    /// Work-items per work-group.
    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// One warp's sub-tile, rows x columns.
    pub fn warp_tile(&self) -> (u32, u32) {
        (self.bm / self.warps_m.max(1), self.bn / self.warps_n.max(1))
    }

    /// Why the blocking cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |why: String| Err(format!("tensor-core blocking {self}: {why}"));
        if self.warps_m == 0 || self.warps_n == 0 || self.warps_m * self.warps_n > 16 {
            return bad("the work-group must have 1 to 16 warps".into());
        }
        if self.bm == 0
            || self.bn == 0
            || !self.bm.is_multiple_of(self.warps_m)
            || !self.bn.is_multiple_of(self.warps_n)
        {
            return bad("the block must split evenly among the warps".into());
        }
        let (wm, wn) = self.warp_tile();
        if wm % 16 != 0 || wn % 8 != 0 {
            return bad(format!("a warp's tile {wm}x{wn} must be a multiple of 16x8 (m16n8k16)"));
        }
        if (wm / 16) * (wn / 8) > 64 {
            return bad(format!("a warp's tile {wm}x{wn} needs more than 64 accumulators"));
        }
        if self.bk == 0 || !self.bk.is_multiple_of(16) || self.bk > 128 {
            return bad("the k-tile must be a multiple of 16, at most 128".into());
        }
        if !(2..=4).contains(&self.stages) {
            return bad("stages must be 2, 3 or 4".into());
        }
        let bytes = self.local_bytes();
        if bytes > MAX_LOCAL_BYTES {
            return bad(format!(
                "{bytes} bytes of local memory, more than the 227 KiB ({MAX_LOCAL_BYTES} bytes) an sm_90 \
                 work-group may use (fewer stages or a smaller block)"
            ));
        }
        Ok(())
    }

    /// Local memory the kernel allocates, in bytes (padded operand tiles of 2-byte elements
    /// for every stage, and the f32 staging of one or two 16-row chunks per warp).
    pub fn local_bytes(&self) -> u32 {
        self.operand_bytes() + self.staging_halves() * self.staging_bytes()
    }

    /// Bytes of the operand tiles of every stage (the larger of the two layouts of each).
    fn operand_bytes(&self) -> u32 {
        let (bm, bn, bk) = (self.bm, self.bn, self.bk);
        let a = (bm * (bk + 8)).max(bk * (bm + 8));
        let b = (bn * (bk + 8)).max(bk * (bn + 8));
        2 * self.stages * (a + b)
    }

    /// Bytes of one f32 staging chunk (16 rows by [`Self::epilogue_cols`]) for every warp.
    fn staging_bytes(&self) -> u32 {
        4 * self.warps_m * self.warps_n * 16 * self.epilogue_cols()
    }

    /// Staging chunks per warp the epilogue uses in turn: two (one barrier per chunk), or
    /// one (two barriers per chunk) where the second would be what takes the kernel past the
    /// 48 KiB of static shared memory (which needs no launch setup) or past
    /// [`MAX_LOCAL_BYTES`].
    pub(super) fn staging_halves(&self) -> u32 {
        let one = self.operand_bytes() + self.staging_bytes();
        let two = one + self.staging_bytes();
        let crosses = |limit: u32| one <= limit && two > limit;
        if crosses(STATIC_LOCAL_BYTES) || crosses(MAX_LOCAL_BYTES) {
            1
        } else {
            2
        }
    }

    /// Columns of one warp's accumulators the epilogue stages through local memory at once
    /// (16 rows by this many): 16, or 8 when the warp's tile is an odd multiple of 8 wide.
    pub fn epilogue_cols(&self) -> u32 {
        if self.warp_tile().1.is_multiple_of(16) {
            16
        } else {
            8
        }
    }

    /// Blockings a tuner should try for an `m x n x k` problem, best guess first (for large
    /// problems on an H100/H200: 128x256 or 256x128 blocks of 64x64 warp tiles, 3 or 4
    /// stages); all valid.
    pub fn candidates(m: u64, n: u64, k: u64) -> Vec<TcConfig> {
        let mut out = Vec::new();
        for (bm, bn, wm, wn) in [
            (128, 256, 2, 4),
            (256, 128, 4, 2),
            (128, 128, 2, 2),
            (128, 128, 2, 4),
            (64, 128, 2, 2),
            (128, 64, 2, 2),
            (64, 64, 2, 2),
            (32, 32, 1, 2),
        ] {
            for (bk, stages) in [(32, 4), (64, 3), (64, 2), (32, 3), (32, 2), (16, 4)] {
                let cfg = TcConfig { bm, bn, bk, warps_m: wm, warps_n: wn, stages };
                // Keep blocks that do not dwarf the problem.
                let fits = (bm as u64) < 2 * m.max(16)
                    && (bn as u64) < 2 * n.max(16)
                    && (bk as u64) < 2 * k.max(16);
                if cfg.validate().is_ok() && fits {
                    out.push(cfg);
                }
            }
        }
        if out.is_empty() {
            out.push(TcConfig { bm: 32, bn: 32, bk: 16, warps_m: 1, warps_n: 2, stages: 2 });
        }
        out
    }
}
