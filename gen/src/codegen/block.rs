//! The register block: where each work-item sits in its work-group (warp tiles with
//! vectors), which rows and columns of the tiles it owns, and the multiply of two local
//! tiles into its accumulators.

use kiln_ir::{Expr, Intrinsic, Scalar, Stmt, Type, Var};

use super::Gen;
use crate::config::GemmConfig;
use crate::ix::{self, c};

impl Gen<'_> {
    /// Register-block rows (or columns) of `t` lanes come in groups of `gw` contiguous
    /// elements: `vec` when it divides `t` (each work-item reads a group with one `vload`,
    /// and neighbouring work-items read neighbouring groups, so a warp's local-memory reads
    /// are contiguous and free of bank conflicts), else the whole block.
    pub(super) fn group(&self, t: u32) -> i64 {
        if t.is_multiple_of(self.cfg.vec) {
            self.cfg.vec as i64
        } else {
            t as i64
        }
    }

    /// The tile coordinate of element `i` of a register block of `t` lanes owned by
    /// work-item `w` of `wg` along that axis: `w + i * wg` (lanes `wg` apart) without
    /// vectors; with them, group `i / gw` starts at `(i / gw) * wg * gw` and work-item `w`
    /// owns lanes `w * gw .. w * gw + gw` of it.
    pub(super) fn lane_at(&self, w: &Expr, i: i64, t: u32, wg: u32) -> Expr {
        let (stride, off) = self.lane_split(i, t, wg);
        ix::add(&ix::mul(w, &c(stride)), &c(off))
    }

    /// [`Gen::lane_at`] as `w * stride + offset`: the part that depends on the work-item
    /// and the constant part.
    pub(super) fn lane_split(&self, i: i64, t: u32, wg: u32) -> (i64, i64) {
        if self.cfg.vec > 1 {
            let gw = self.group(t);
            (gw, (i / gw) * wg as i64 * gw + i % gw)
        } else {
            (1, i * wg as i64)
        }
    }

    /// The row of the tile (0 .. BM) that register-block row `i` of work-item row `ty` is.
    pub(super) fn row(&self, ty: &Expr, i: i64) -> Expr {
        self.lane_at(ty, i, self.cfg.tm, self.cfg.wg_m)
    }

    /// The column of the tile that register-block column `j` of work-item column `tx` is.
    pub(super) fn col(&self, tx: &Expr, j: i64) -> Expr {
        self.lane_at(tx, j, self.cfg.tn, self.cfg.wg_n)
    }

    /// Loads `n` register-block operands from local array `s` at `base + f(i)`: one `vload`
    /// when the block is contiguous (`vec > 1`) and `n` is a lane count, else scalars.
    pub(super) fn block_loads(
        &self,
        s: &Var,
        base: &Expr,
        tag: &str,
        n: i64,
        at: &dyn Fn(i64) -> Expr,
        body: &mut Vec<Stmt>,
    ) -> Vec<Expr> {
        let gw = self.group(n as u32);
        if self.cfg.vec > 1 && [2, 4, 8].contains(&gw) {
            let mut out = Vec::new();
            for g in 0..n / gw {
                let v = Var::new(format!("{tag}_v{g}"), Type::vector(Scalar::F32, gw as u8));
                let at0 = ix::add(base, &at(g * gw));
                body.push(Stmt::let_(&v, Expr::vload(s, at0, gw as u8)));
                out.extend((0..gw).map(|i| v.expr().extract(i as u8)));
            }
            return out;
        }
        (0..n)
            .map(|i| {
                let x = Var::new(format!("{tag}_{i}"), Type::F32);
                body.push(Stmt::let_(&x, s.load(ix::add(base, &at(i)))));
                x.expr()
            })
            .collect()
    }

    /// The multiply of the tiles at slots `sa`, `sb` into the register block. Each
    /// work-item's first row and column of the tiles are bound once, so that every read
    /// in the (unrolled) `kk` loop is that position plus a constant, which backends fold
    /// into the address.
    pub(super) fn multiply(
        &self,
        sa: &Expr,
        sb: &Expr,
        acc: &[Vec<Var>],
        tx: &Expr,
        ty: &Expr,
    ) -> Stmt {
        let cfg = &self.cfg;
        let kk = Var::new("kk", Type::I32);
        let (a_at, b_at) = (Var::new("a_at", Type::I32), Var::new("b_at", Type::I32));
        let pre = [
            Stmt::let_(&a_at, ix::add(sa, &self.row(ty, 0))),
            Stmt::let_(&b_at, ix::add(sb, &self.col(tx, 0))),
        ];
        let mut body = Vec::new();
        let abase = ix::add(&a_at.expr(), &ix::mul(&kk.expr(), &c(self.stride(true))));
        let ar = self.block_loads(
            &self.a_s,
            &abase,
            "a",
            cfg.tm as i64,
            &|i| c(self.lane_split(i, cfg.tm, cfg.wg_m).1),
            &mut body,
        );
        let bbase = ix::add(&b_at.expr(), &ix::mul(&kk.expr(), &c(self.stride(false))));
        let br = self.block_loads(
            &self.b_s,
            &bbase,
            "b",
            cfg.tn as i64,
            &|j| c(self.lane_split(j, cfg.tn, cfg.wg_n).1),
            &mut body,
        );
        for (i, a) in ar.iter().enumerate() {
            for (j, b) in br.iter().enumerate() {
                let s = &acc[i][j];
                let f = Expr::intrinsic(Intrinsic::Fma, [a.clone(), b.clone(), s.clone().expr()]);
                body.push(Stmt::assign(s, f));
            }
        }
        let mut out = pre.to_vec();
        if cfg.unroll {
            // Unrolled here rather than left to the `unroll` pass, whose size limit keeps an
            // 8 x 8 block's loop at a k-tile of 16 (1088 statements) rolled; the same blocks
            // the pass makes.
            for i in 0..cfg.k_tile as i64 {
                let mut copy = vec![Stmt::let_(&kk, c(i))];
                copy.extend(body.iter().cloned());
                out.push(Stmt::block(copy));
            }
        } else {
            out.push(Stmt::for_(&kk, c(0), c(cfg.k_tile as i64), c(1), Stmt::block(body)));
        }
        Stmt::block(out)
    }
}

/// Whether work-items are arranged in 8 x 4 warp tiles (see [`work_item_n`]).
fn warp_tiled(cfg: &GemmConfig) -> bool {
    cfg.vec > 1
        && cfg.wg_n.is_multiple_of(8)
        && cfg.wg_m.is_multiple_of(4)
        && cfg.threads().is_multiple_of(32)
}

/// The work-item's column position `tx` (0 .. wg_n) from its linear id. With vectors,
/// each run of 32 linear ids (a warp or subgroup) covers 8 columns by 4 rows of
/// work-items, so the warp's local-memory reads of B are 8 neighbouring groups (one
/// conflict-free access) and of A 4 groups, instead of 16 and 2 of a row-major mapping.
pub(super) fn work_item_n(cfg: &GemmConfig, lid: &Expr) -> Expr {
    if !warp_tiled(cfg) {
        return Expr::local_id(0).cast(Scalar::I32);
    }
    let warp = ix::div(lid, 32);
    let lane = ix::rem(lid, 32);
    ix::add(&ix::mul(&ix::rem(&warp, cfg.wg_n as i64 / 8), &c(8)), &ix::rem(&lane, 8))
}

/// The work-item's row position `ty` (0 .. wg_m), the partner of [`work_item_n`].
pub(super) fn work_item_m(cfg: &GemmConfig, lid: &Expr) -> Expr {
    if !warp_tiled(cfg) {
        return Expr::local_id(1).cast(Scalar::I32);
    }
    let warp = ix::div(lid, 32);
    let lane = ix::rem(lid, 32);
    ix::add(&ix::mul(&ix::div(&warp, cfg.wg_n as i64 / 8), &c(4)), &ix::div(&lane, 8))
}
