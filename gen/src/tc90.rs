//! Tensor-core GEMM for the warpgroup (sm_90a) tier: `C = epilogue(A · B)` with A stored
//! M x K or K x M (`trans_a`) and B stored K x N or N x K (`trans_b`), f16 or bf16 inputs, f32
//! accumulation, through the IR's warpgroup operations (docs/matrix.md, "Warpgroup
//! operations"). A factor stored K-contiguous (A M x K, B N x K) is copied as rows of 64 k
//! elements and read K-major; one stored M- or N-contiguous (A K x M, B K x N) is copied as
//! boxes of 64 k rows of 64 M (or N) elements, 8192 bytes apart, and read MN-major (`wgmma`'s
//! transposed layouts): either way a stage of A is 128 x 64 elements, of B `bn` x 64.
//!
//! A work-group of three warpgroups (384 work-items) computes a `128 x bn` block of C:
//!
//! ```text
//! local a_s: T[stages * 128 * 64]; local b_s: T[stages * bn * 64]   // 128-byte swizzle
//! local full: u64[stages]; local empty: u64[stages]                  // barrier objects
//! warpgroup 0, one work-item (the producer):
//!   for kt: s = kt % stages
//!     if kt >= stages: mbar_wait(empty, s, (kt / stages - 1) & 1)      // slot released
//!     mbar_expect_tx(full, s, bytes); tma_load A's and B's boxes into slot s
//! warpgroups 1 and 2 (the consumers, rows 64 (w - 1) ..):
//!   for kt: mbar_wait(full, s, (kt / stages) & 1)
//!     wgmma_fence(); 4 x wgmma m64n{bn}k16 (k = 0, 16, 32, 48); wgmma_commit()
//!     wgmma_wait(1); lane 0 of each warp releases the previous slot: mbar_arrive(empty, ..)
//!   wgmma_wait(0); each work-item applies the epilogue to its bn/2 elements (frag_elem)
//!   and stores those inside C
//! ```
//!
//! Two options of [`Tc90Config`]:
//!
//! * `persistent = P` (on by default, P = [`DEFAULT_PERSISTENT`]; 0 turns it off): at most
//!   `P` work-groups (P = 132, the H100's multiprocessors; as few as
//!   run the tiles in as many rounds, so 512 tiles take 128), each
//!   running the above for tiles `group_id + i * groups` (block rows and columns in the same
//!   raster). The ring runs on across tiles: step `g = i * ktiles + kt` uses slot `g % stages`
//!   and phase `g / stages`, and after each tile's `wgmma_wait(0)` the consumers release its
//!   last slot, so the producer copies the next tile while the consumers store this one.
//! * `setmaxnreg` (off by default): the producer warpgroup lowers its register budget to [`PRODUCER_REGS`], the
//!   consumers raise theirs to [`CONSUMER_REGS`] (`setmaxnreg_dec` / `setmaxnreg_inc`).
//!
//! The copies zero-fill past M, N and K (the tensor copy does), so odd sizes need no other
//! handling than the masked store; the row pitch of A and B (the stored row length: K, M or
//! N) must be a multiple of 16 bytes (8 elements), which the copy requires. On the
//! interpreter the product is the sequential sum over k, bit for bit, as for the sm_80
//! generator ([`crate::tc`]).

use std::fmt;

use kiln_ir::matrix::{Frag, FragRole, MatShape, MatrixOp};
use kiln_ir::warpgroup::{Swizzle, TmaBox, WgLayout};
use kiln_ir::{
    AddrSpace, Attrs, Expr, Func, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

use crate::ix::{self, c};
use crate::tc::{TcGemmProblem, TcGenerated};
use crate::tc_epilogue::apply;

/// Rows of C per work-group (two consumer warpgroups of 64 rows).
pub const BM: u32 = 128;
/// Reduction depth of one stage: 64 elements, one 128-byte swizzled row.
pub const BK: u32 = 64;
/// Work-items per work-group: a producer warpgroup and two consumers.
pub const THREADS: u32 = 384;
/// The most local memory a work-group may use on sm_90 (bytes).
const MAX_LOCAL: u32 = 227 * 1024;

/// Registers per work-item the producer warpgroup keeps when [`Tc90Config::setmaxnreg`] is on.
pub const PRODUCER_REGS: u16 = 40;
/// Registers per work-item each consumer warpgroup takes when [`Tc90Config::setmaxnreg`] is
/// on: with [`PRODUCER_REGS`], `128 * 40 + 256 * 232 = 64512` of the 65536 a multiprocessor
/// has.
pub const CONSUMER_REGS: u16 = 232;
/// The default [`Tc90Config::persistent`]: the multiprocessors of an H100 or H200 (SXM). On
/// parts with fewer, pass theirs: a group past them waits for a second wave.
pub const DEFAULT_PERSISTENT: u32 = 132;
/// The most work-groups a persistent kernel may launch.
const MAX_PERSISTENT: u32 = 1 << 16;

/// The blocking of the sm_90 GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tc90Config {
    /// Columns of C per work-group: 64, 128 or 256 (the `wgmma` N).
    pub bn: u32,
    /// Stages of the copy ring (2 to 8, within 227 KiB).
    pub stages: u32,
    /// Persistent tiles: 0 launches one work-group per `128 x bn` tile of C; `g > 0`
    /// launches at most `g` work-groups (132, the H100's multiprocessors, is the natural
    /// value), as few as run the tiles in as many rounds, work-group `i` computing tiles
    /// `i, i + groups, ..` with its copy ring running on across them, so that one tile's
    /// epilogue overlaps the next tile's copies.
    pub persistent: u32,
    /// The producer warpgroup lowers its register budget to [`PRODUCER_REGS`] and the
    /// consumers raise theirs to [`CONSUMER_REGS`] (`setmaxnreg`).
    pub setmaxnreg: bool,
}

impl Default for Tc90Config {
    /// 128 x 256 blocks, 3 stages (144 KiB of local memory), persistent tiles on at most
    /// [`DEFAULT_PERSISTENT`] work-groups: the fastest of those measured on the H100 and H200
    /// at 4096^3 and 8192^3, bf16 and f16 (docs/tensor-cores.md); no register rebalancing.
    fn default() -> Tc90Config {
        Tc90Config { bn: 256, stages: 3, persistent: DEFAULT_PERSISTENT, setmaxnreg: false }
    }
}

impl fmt::Display for Tc90Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_90 block={BM}x{}x{BK} stages={}", self.bn, self.stages)?;
        if self.persistent > 0 {
            write!(f, " persistent={}", self.persistent)?;
        }
        if self.setmaxnreg {
            write!(f, " setmaxnreg={PRODUCER_REGS}/{CONSUMER_REGS}")?;
        }
        Ok(())
    }
}

impl Tc90Config {
    /// Local memory the kernel allocates, in bytes.
    pub fn local_bytes(&self) -> u32 {
        self.stages * (BM + self.bn) * BK * 2 + 16 * self.stages
    }

    /// Why the blocking cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if ![64, 128, 256].contains(&self.bn) {
            return Err(format!("{self}: the block's columns must be 64, 128 or 256"));
        }
        if !(2..=8).contains(&self.stages) {
            return Err(format!("{self}: stages must be 2 to 8"));
        }
        if self.persistent > MAX_PERSISTENT {
            return Err(format!(
                "{self}: a persistent kernel launches at most {MAX_PERSISTENT} work-groups"
            ));
        }
        if self.local_bytes() + 1024 > MAX_LOCAL {
            return Err(format!(
                "{self}: {} bytes of local memory, more than the 227 KiB an sm_90 work-group \
                 may use",
                self.local_bytes()
            ));
        }
        Ok(())
    }
}

/// Why `p` has no sm_90 kernel, if it has none.
pub fn check_problem(p: &TcGemmProblem) -> Result<(), String> {
    p.validate()?;
    let pitch = |name: &str, stored: &str, dim: &str, v: i64| {
        if v % 8 == 0 {
            return Ok(());
        }
        Err(format!(
            "the sm_90 GEMM copies tiles with the tensor copy engine, whose row pitch must be a \
             multiple of 16 bytes: {name} is stored {stored}, so its rows are {dim} = {v} \
             elements, not a multiple of 8"
        ))
    };
    match p.trans_a {
        false => pitch("A", "M x K", "K", p.k)?,
        true => pitch("A", "K x M", "M", p.m)?,
    }
    match p.trans_b {
        true => pitch("B", "N x K", "K", p.k),
        false => pitch("B", "K x N", "N", p.n),
    }
}

/// Generates the sm_90 kernel for `p` with blocking `cfg`: parameters `(a, b, c)` then the
/// epilogue's, launched as `#nd_range` says.
pub fn generate(p: &TcGemmProblem, cfg: &Tc90Config) -> Result<TcGenerated, String> {
    check_problem(p)?;
    cfg.validate()?;
    let kernel = Gen { p, cfg: *cfg }.kernel();
    crate::codegen::verify_generated(&kernel)?;
    let [g0, g1] = launch_groups(p, cfg);
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    Ok(TcGenerated {
        kernel,
        global: [g0 * THREADS, g1],
        local: [THREADS, 1],
        buffer_elems: [m * k, k * n, m * n],
    })
}

/// Tiles of C: (columns, rows).
fn grid(p: &TcGemmProblem, cfg: &Tc90Config) -> (u32, u32) {
    ((p.n as u32).div_ceil(cfg.bn), (p.m as u32).div_ceil(BM))
}

/// Work-groups launched along each dimension: one per tile, or at most `persistent` in a
/// row, as few as keep the rounds of tiles that many would run (so that every work-group
/// runs the same number of tiles, give or take one: 512 tiles on at most 132 take 4 rounds,
/// run by 128 work-groups).
fn launch_groups(p: &TcGemmProblem, cfg: &Tc90Config) -> [u32; 2] {
    let (gn, gm) = grid(p, cfg);
    match cfg.persistent {
        0 => [gn, gm],
        g => {
            let tiles = gn * gm;
            [tiles.div_ceil(tiles.div_ceil(g)), 1]
        }
    }
}

struct Gen<'a> {
    p: &'a TcGemmProblem,
    cfg: Tc90Config,
}

fn u(v: u32) -> Expr {
    Expr::u32(v)
}

fn call(op: MatrixOp, args: impl IntoIterator<Item = Expr>) -> Stmt {
    Stmt::call(Func::matrix(op), args)
}

/// Bytes between the boxes of 64 M (or N) elements of an MN-major stage: one box of 64 k rows
/// of 128 bytes.
const MN_STRIDE: u32 = BK * 128;

/// Block rows that run side by side (bands walked column by column keep A and B in L2).
const RASTER_ROWS: u32 = 8;

impl Gen<'_> {
    /// The block row and column (u32) of tile `tile` (row-major numbering; `None`: the
    /// work-group's, by its ids), in bands of [`RASTER_ROWS`] block rows where they split
    /// evenly.
    fn block_origin(&self, tile: Option<Expr>) -> (Expr, Expr) {
        let (gn, gm) = grid(self.p, &self.cfg);
        let raster = !(gm <= RASTER_ROWS || gm % RASTER_ROWS != 0 || gn == 1);
        let linear = match tile {
            None if !raster => return (Expr::group_id(1), Expr::group_id(0)),
            None => Expr::group_id(1) * u(gn) + Expr::group_id(0),
            Some(t) if !raster => return (t.clone() / u(gn), t % u(gn)),
            Some(t) => t,
        };
        let band = linear.clone() / u(RASTER_ROWS * gn);
        let within = linear % u(RASTER_ROWS * gn);
        (band * u(RASTER_ROWS) + within.clone() % u(RASTER_ROWS), within / u(RASTER_ROWS))
    }

    fn kernel(&self) -> Kernel {
        let p = self.p;
        let (bn, s) = (self.cfg.bn, self.cfg.stages);
        let (m, n, k) = (p.m as u32, p.n as u32, p.k as u32);
        let ktiles = k.div_ceil(BK);
        let lptr = |name: &str, t: Scalar| Var::new(name, Type::ptr(AddrSpace::Local, t));
        let (a_s, b_s) = (lptr("a_s", p.ty), lptr("b_s", p.ty));
        let (full, empty) = (lptr("full", Scalar::U64), lptr("empty", Scalar::U64));
        let a = Var::new("a", Type::ptr(AddrSpace::Global, p.ty));
        let b = Var::new("b", Type::ptr(AddrSpace::Global, p.ty));
        let cbuf = Var::new("c", Type::ptr(AddrSpace::Global, p.out));
        let lin = Var::new("lin", Type::U32);
        let (m0, n0) = (Var::new("m0", Type::U32), Var::new("n0", Type::U32));
        let a_tile = BM * BK;
        let b_tile = bn * BK;
        // Persistent: the work-group's tiles are `tile = group_id(0) + i * groups`; `base`
        // (= i * ktiles) numbers the ring's steps across them, so slots and phases run on.
        let tile = Var::new("tile", Type::U32);
        let base = Var::new("base", Type::U32);
        let [groups, _] = launch_groups(p, &self.cfg);
        let persistent = self.cfg.persistent > 0;
        let origin = |this: &Self| {
            let (block_m, block_n) = this.block_origin(persistent.then(|| tile.expr()));
            let mut v = vec![Stmt::let_(&m0, block_m * u(BM)), Stmt::let_(&n0, block_n * u(bn))];
            if persistent {
                v.push(Stmt::let_(
                    &base,
                    (tile.expr() - Expr::group_id(0)) / u(groups) * u(ktiles),
                ));
            }
            v
        };
        // The ring step of k tile `kt`.
        let step_no = |kt: &Var| match persistent {
            false => kt.expr(),
            true => base.expr() + kt.expr(),
        };
        // A tile's statements: as they are, or in the loop over the work-group's tiles.
        let per_tile = |v: Vec<Stmt>| match persistent {
            false => v,
            true => vec![Stmt::for_(
                &tile,
                Expr::group_id(0),
                u(gn_gm(p, &self.cfg)),
                u(groups),
                Stmt::block(v),
            )],
        };
        let mut body = vec![
            Stmt::alloc(&a_s, s * a_tile),
            Stmt::alloc(&b_s, s * b_tile),
            Stmt::alloc(&full, s),
            Stmt::alloc(&empty, s),
            Stmt::let_(&lin, Expr::local_id(0)),
        ];
        if !persistent {
            body.extend(origin(self));
        }
        // Barrier objects: `full[s]` completes when slot s's bytes have landed (the
        // producer's one arrival plus the transaction count), `empty[s]` when the 8 warps of
        // the consumer warpgroups have released it (`wgmma_wait` covers the groups of the
        // warp that executes it, so each warp arrives for itself).
        let sv = Var::new("s", Type::U32);
        body.push(Stmt::if_(
            lin.expr().cmp_eq(u(0)),
            Stmt::for_(
                &sv,
                u(0),
                u(s),
                u(1),
                Stmt::block([
                    call(MatrixOp::MbarInit, [full.expr(), sv.expr(), u(1)]),
                    call(MatrixOp::MbarInit, [empty.expr(), sv.expr(), u(8)]),
                ]),
            ),
        ));
        body.push(Stmt::barrier(MemFence::LOCAL));

        // The producer.
        let kt = Var::new("kt", Type::U32);
        let slot = Var::new("slot", Type::U32);
        let bytes = (BM + bn) * BK * p.ty.size_bytes() as u32;
        let sw = Swizzle::B128;
        let esize = p.ty.size_bytes() as u32;
        // One factor's copies into `dst[di..]`: `rows` M (or N) rows from `r0`. Stored
        // K-contiguous (`width` = K), one box of `rows` rows of 64 k; stored MN-contiguous
        // (`width` = M or N), `rows / 64` boxes of 64 k rows of 64 elements, MN_STRIDE apart.
        let tma = |dst: &Var, di: Expr, src: &Var, k_major: bool, mn: u32, rows: u32, r0: &Var| {
            let (width, height) = if k_major { (k, mn) } else { (mn, k) };
            let (w, h, boxes) = if k_major { (BK, rows, 1) } else { (64, BK, rows / 64) };
            (0..boxes)
                .map(|j| {
                    let (x, y) = if k_major {
                        (kt.expr() * u(BK), r0.expr())
                    } else {
                        (r0.expr() + u(64 * j), kt.expr() * u(BK))
                    };
                    call(
                        MatrixOp::TmaLoad(TmaBox { w: w as u16, h: h as u16, swizzle: sw }),
                        [
                            dst.expr(),
                            match j {
                                0 => di.clone(),
                                _ => di.clone() + u(j * MN_STRIDE / esize),
                            },
                            src.expr(),
                            u(width),
                            u(height),
                            u(width),
                            x,
                            y,
                            full.expr(),
                            slot.expr(),
                        ],
                    )
                })
                .collect::<Vec<_>>()
        };
        let (a_k, b_k) = (!p.trans_a, p.trans_b);
        let g = step_no(&kt);
        let mut copy = vec![
            Stmt::let_(&slot, g.clone() % u(s)),
            Stmt::if_(
                g.clone().cmp_ge(u(s)),
                call(
                    MatrixOp::MbarWait,
                    [empty.expr(), slot.expr(), (g.clone() / u(s) + u(1)) & u(1)],
                ),
            ),
            call(MatrixOp::MbarExpectTx, [full.expr(), slot.expr(), u(bytes)]),
        ];
        copy.extend(tma(&a_s, slot.expr() * u(a_tile), &a, a_k, m, BM, &m0));
        copy.extend(tma(&b_s, slot.expr() * u(b_tile), &b, b_k, n, bn, &n0));
        let produce = Stmt::for_(&kt, u(0), u(ktiles), u(1), Stmt::block(copy));
        let mut produce_tiles = if persistent { origin(self) } else { Vec::new() };
        produce_tiles.push(produce);
        let mut producer = Vec::new();
        if self.cfg.setmaxnreg {
            producer.push(call(MatrixOp::SetMaxNReg { inc: false, count: PRODUCER_REGS }, []));
        }
        let mut produce_tiles = per_tile(produce_tiles);
        let produce_all = match produce_tiles.len() {
            1 => produce_tiles.remove(0),
            _ => Stmt::block(produce_tiles),
        };
        producer.push(Stmt::if_(lin.expr().cmp_eq(u(0)), produce_all));

        // The consumers.
        let wg = Var::new("wg", Type::U32);
        let t = Var::new("t", Type::U32);
        let accty = Type::Frag(Frag::new(FragRole::Acc, MatShape::M64(bn as u16), Scalar::F32));
        let z = Var::new("zero", accty);
        let acc = Var::new("acc", accty);
        let a_row = Var::new("a_row", Type::U32);
        let mut cons = Vec::new();
        if self.cfg.setmaxnreg {
            cons.push(call(MatrixOp::SetMaxNReg { inc: true, count: CONSUMER_REGS }, []));
        }
        cons.extend([
            Stmt::let_(&wg, (lin.expr() >> u(7)) - u(1)),
            Stmt::let_(&t, lin.expr() & u(127)),
            // Either layout puts the consumer's 64 rows of A 8192 bytes into the stage.
            Stmt::let_(&a_row, wg.expr() * u(64 * BK)),
            Stmt::call_into(&z, Func::matrix(MatrixOp::Fill), [Expr::f32(0.0)]),
        ]);
        let mut tile_cons = if persistent { origin(self) } else { Vec::new() };
        tile_cons.push(Stmt::decl(&acc, z.expr()));
        let mut step = vec![
            Stmt::let_(&slot, g.clone() % u(s)),
            call(MatrixOp::MbarWait, [full.expr(), slot.expr(), (g.clone() / u(s)) & u(1)]),
            call(MatrixOp::WgFence, []),
        ];
        // A k step of 16 moves 16 elements along a K-major row, 16 rows of 64 down an
        // MN-major box.
        let layout = |k_major: bool| {
            if k_major {
                (WgLayout::k(sw), 16)
            } else {
                (WgLayout::mn(sw, MN_STRIDE), 16 * 64)
            }
        };
        let ((la, ka), (lb, kb)) = (layout(a_k), layout(b_k));
        for ks in 0..BK / 16 {
            step.push(call(
                MatrixOp::Wgmma(la, lb),
                [
                    acc.expr(),
                    a_s.expr(),
                    slot.expr() * u(a_tile) + a_row.expr() + u(ka * ks),
                    b_s.expr(),
                    slot.expr() * u(b_tile) + u(kb * ks),
                ],
            ));
        }
        step.push(call(MatrixOp::WgCommit, []));
        // The previous step's products are done: this warp releases its slot.
        step.push(call(MatrixOp::WgWait(1), []));
        step.push(Stmt::if_(
            ix_and(kt.expr().cmp_ge(u(1)), (t.expr() & u(31)).cmp_eq(u(0))),
            call(MatrixOp::MbarArrive, [empty.expr(), (g.clone() + u(s - 1)) % u(s)]),
        ));
        tile_cons.push(Stmt::for_(&kt, u(0), u(ktiles), u(1), Stmt::block(step)));
        tile_cons.push(call(MatrixOp::WgWait(0), []));
        if persistent {
            // The tile's last slot is released here (the next tile's first step releases
            // nothing), so that the ring runs on.
            tile_cons.push(Stmt::if_(
                (t.expr() & u(31)).cmp_eq(u(0)),
                call(MatrixOp::MbarArrive, [empty.expr(), (base.expr() + u(ktiles - 1)) % u(s)]),
            ));
        }
        tile_cons.extend(self.store(&acc, &wg, &t, &m0, &n0, &cbuf));
        cons.extend(per_tile(tile_cons));
        body.push(Stmt::if_else(
            lin.expr().cmp_lt(u(128)),
            Stmt::block(producer),
            Stmt::block(cons),
        ));

        let mut params = vec![a, b, cbuf];
        params.extend(p.epilogue.params(p.out));
        let [g0, g1] = launch_groups(p, &self.cfg);
        let attrs = Attrs {
            reqd_work_group_size: Some([THREADS, 1, 1]),
            nd_range: Some(NdRangeAttr {
                offset: vec![0, 0],
                global: vec![g0 * THREADS, g1],
                local: Some(vec![THREADS, 1]),
            }),
            ..Attrs::default()
        };
        let name = p.name().replacen("tc_gemm", "tc90_gemm", 1);
        Kernel::with_attrs(name, params, attrs, Stmt::block(body))
    }

    /// Each work-item's `bn / 2` accumulator elements, straight from its registers: element
    /// `i` is row `16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2)` and column
    /// `8 (i / 4) + 2 (t % 4) + i % 2` of the warpgroup's 64-row tile
    /// (`kiln_ir::warpgroup::acc_coords`).
    fn store(&self, acc: &Var, wg: &Var, t: &Var, m0: &Var, n0: &Var, cbuf: &Var) -> Vec<Stmt> {
        let p = self.p;
        let bn = self.cfg.bn;
        let (r0, c0) = (Var::new("r0", Type::I32), Var::new("c0", Type::I32));
        let mut out = vec![
            Stmt::let_(
                &r0,
                (m0.expr()
                    + wg.expr() * u(64)
                    + (t.expr() >> u(5)) * u(16)
                    + ((t.expr() & u(31)) >> u(2)))
                .cast(Scalar::I32),
            ),
            Stmt::let_(&c0, (n0.expr() + (t.expr() & u(3)) * u(2)).cast(Scalar::I32)),
        ];
        // Elements `i` and `i + 1` (`i` even) are neighbouring columns of one row, the first
        // one's even: where N is even they go out as one aligned 2-lane store, and the first
        // column's bound covers both.
        let pair = p.n % 2 == 0;
        let step = if pair { 2 } else { 1 };
        for i0 in (0..bn / 2).step_by(step) {
            let (gm, gn) =
                (Var::new(format!("gm{i0}"), Type::I32), Var::new(format!("gn{i0}"), Type::I32));
            out.push(Stmt::let_(&gm, ix::add(&r0.expr(), &c(8 * ((i0 as i64 / 2) % 2)))));
            out.push(Stmt::let_(&gn, ix::add(&c0.expr(), &c(8 * (i0 as i64 / 4) + i0 as i64 % 2))));
            let mut body = Vec::new();
            let mut vals = Vec::new();
            for i in i0..i0 + step as u32 {
                let x = Var::new(format!("x{i}"), Type::F32);
                out.push(Stmt::call_into(
                    &x,
                    Func::matrix(MatrixOp::FragElem(i as u8)),
                    [acc.expr()],
                ));
                let col = ix::add(&gn.expr(), &c((i - i0) as i64));
                let mut val = x.expr();
                for &op in &p.epilogue.0 {
                    val = apply(op, val, &gm.expr(), &col, p.n, p.out, &mut body);
                }
                vals.push(if p.out == Scalar::F32 { val } else { val.cast(p.out) });
            }
            let at = ix::add(&ix::mul(&gm.expr(), &c(p.n)), &gn.expr());
            body.push(match vals.len() {
                1 => Stmt::store(cbuf, at, vals.pop().expect("one value")),
                _ => Stmt::vstore(cbuf, at, Expr::build_vector(vals)),
            });
            let cond = ix::and(
                (p.m % BM as i64 != 0).then(|| gm.expr().cmp_lt(c(p.m))),
                (p.n % bn as i64 != 0).then(|| gn.expr().cmp_lt(c(p.n))),
            );
            out.push(match cond {
                Some(cond) => Stmt::if_(cond, Stmt::block(body)),
                None => Stmt::block(body),
            });
        }
        out
    }
}

/// Tiles of C in all.
fn gn_gm(p: &TcGemmProblem, cfg: &Tc90Config) -> u32 {
    let (gn, gm) = grid(p, cfg);
    gn * gm
}

fn ix_and(a: Expr, b: Expr) -> Expr {
    ix::and(Some(a), Some(b)).expect("two conditions")
}
