//! Matrix operations on the sm_80 tier: fragments in registers laid out as
//! `mma.sync.aligned.m16n8k16` wants them (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//! with `g = laneid >> 2` and `t = laneid & 3`,
//! * `a` (16x16, four `.b32` of two halves): reg 0 = (g, 2t..2t+1), reg 1 = (g+8, 2t..),
//!   reg 2 = (g, 2t+8..), reg 3 = (g+8, 2t+8..);
//! * `b` (16x8 per 8 columns `nb`, two `.b32`): reg 2nb = (2t..2t+1, 8nb+g), reg 2nb+1 =
//!   (2t+8..2t+9, 8nb+g);
//! * `acc` (16x8 per `nb`, four `.f32`): reg 4nb+i = (g + 8(i>>1), 8nb + 2t + (i&1)).
//!
//! The lower half of a `.b32` holds the element of the lower k. A `m16n16k16` product is two
//! `m16n8k16` ones (`nb` = 0, 1). Loads from local memory use `ldmatrix` (`.trans` where the
//! tile's memory rows are its k), other loads and stores go element by element.

use kiln_ir::matrix::{FragRole, Layout, MatShape, MatrixOp};
use kiln_ir::{Expr, ExprNode, Imm, Scalar, Type, Var};

use super::{Binding, Lower, Mem, R};
use crate::ptx::regs::{Class, Reg, Val};

/// An element's position for this lane: `(row, col)` as `(g or t-based, constant)` parts.
#[derive(Clone, Copy)]
enum Part {
    /// `g + c`.
    G(u32),
    /// `2t + c`.
    T2(u32),
}

/// The elements lane (g, t) holds, register by register, two per `.b32` for a/b.
fn elements(role: FragRole, shape: MatShape) -> Vec<Vec<(Part, Part)>> {
    let nbs = if shape == MatShape::M16N8K16 { 1 } else { 2 };
    let mut regs = Vec::new();
    match role {
        FragRole::A => {
            for (ro, co) in [(0, 0), (8, 0), (0, 8), (8, 8)] {
                regs.push(vec![(Part::G(ro), Part::T2(co)), (Part::G(ro), Part::T2(co + 1))]);
            }
        }
        FragRole::B => {
            for nb in 0..nbs {
                for ko in [0, 8] {
                    regs.push(vec![
                        (Part::T2(ko), Part::G(8 * nb)),
                        (Part::T2(ko + 1), Part::G(8 * nb)),
                    ]);
                }
            }
        }
        FragRole::Acc => {
            for nb in 0..nbs {
                for i in 0..4 {
                    regs.push(vec![(Part::G(8 * (i >> 1)), Part::T2(8 * nb + (i & 1)))]);
                }
            }
        }
    }
    regs
}

impl Lower<'_> {
    pub(super) fn frag_regs(&self, e: &Expr) -> R<Vec<Reg>> {
        let v = e.as_var().ok_or("ill-formed kernel: a fragment operand is not a variable")?;
        match self.lookup(v.name())? {
            Binding::Frag(r) => Ok(r.clone()),
            _ => Err(format!("ill-formed kernel: `{}` is not a fragment", v.name())),
        }
    }

    fn new_frag(&mut self, ty: Type) -> R<Vec<Reg>> {
        let f = ty.frag().ok_or_else(|| format!("ill-formed kernel: {ty} is not a fragment"))?;
        let (n, c) = match f.role {
            FragRole::A => (4, Class::B32),
            FragRole::B => (if f.shape == MatShape::M16N8K16 { 2 } else { 4 }, Class::B32),
            FragRole::Acc => match f.shape {
                MatShape::M16N8K16 => (4, Class::F32),
                MatShape::M16N16K16 => (8, Class::F32),
                MatShape::M64(n) => (n as usize / 2, Class::F32),
            },
        };
        Ok((0..n).map(|_| self.fresh(c)).collect())
    }

    /// `let`/`var` of a fragment (a copy of another fragment variable).
    pub(super) fn frag_bind(&mut self, var: &Var, value: &Expr, mutable: bool) -> R<()> {
        let src = self.frag_regs(value)?;
        let dst = self.new_frag(var.ty())?;
        for (d, s) in dst.iter().zip(&src) {
            self.mov(*d, &Val::Reg(*s));
            if mutable {
                self.mutable.insert(*d);
            }
        }
        self.bind(var.name_arc(), Binding::Frag(dst));
        Ok(())
    }

    /// Assignment of a fragment variable.
    pub(super) fn frag_assign(&mut self, var: &Var, value: &Expr) -> R<()> {
        let dst = self.frag_regs(&Expr::var(var))?;
        let src = self.frag_regs(value)?;
        for (d, s) in dst.iter().zip(&src) {
            self.mov(*d, &Val::Reg(*s));
        }
        Ok(())
    }

    /// `%laneid`, `g = laneid >> 2` and `t2 = 2 * (laneid & 3)`.
    fn lane(&mut self) -> (Reg, Reg, Reg) {
        let lane = self.fresh(Class::B32);
        self.ins(format_args!("mov.u32 {lane}, %laneid"));
        let g = self.fresh(Class::B32);
        self.ins(format_args!("shr.u32 {g}, {lane}, 2"));
        let t2 = self.fresh(Class::B32);
        self.ins(format_args!("and.b32 {t2}, {lane}, 3"));
        self.ins(format_args!("shl.b32 {t2}, {t2}, 1"));
        (lane, g, t2)
    }

    /// The address of element `offset + index(r, c)` of `m`, `r` and `c` registers.
    fn tile_addr(&mut self, m: &Mem, off: Reg, stride: Reg, layout: Layout, r: Reg, c: Reg) -> Reg {
        let (major, minor) = match layout {
            Layout::Row => (r, c),
            Layout::Col => (c, r),
        };
        let i = self.fresh(Class::B32);
        self.ins(format_args!("mad.lo.u32 {i}, {major}, {stride}, {minor}"));
        self.ins(format_args!("add.u32 {i}, {i}, {off}"));
        let a = self.fresh(Class::B64);
        let size = m.elem.size_bytes();
        self.ins(format_args!("mad.wide.u32 {a}, {i}, {size}, {}", m.base));
        a
    }

    fn part(&mut self, p: Part, g: Reg, t2: Reg) -> Reg {
        let (base, c) = match p {
            Part::G(c) => (g, c),
            Part::T2(c) => (t2, c),
        };
        let r = self.fresh(Class::B32);
        self.ins(format_args!("add.u32 {r}, {base}, {c}"));
        r
    }

    fn u32_reg(&mut self, e: &Expr) -> R<Reg> {
        let v = self.expr(e, None)?;
        Ok(self.reg(v, Class::B32))
    }

    /// A matrix call.
    pub(super) fn matrix(&mut self, op: MatrixOp, result: Option<&Var>, args: &[Expr]) -> R<()> {
        let mem_of = |l: &Self, e: &Expr| -> R<Mem> {
            let v = e.as_var().ok_or("ill-formed kernel: a matrix memory operand")?;
            l.mem(v.name())
        };
        match op {
            MatrixOp::Load(layout) => {
                let r = result.ok_or("ill-formed kernel: frag_load without a result")?;
                let f = r.ty().frag().ok_or("ill-formed kernel: frag_load type")?;
                let m = mem_of(self, &args[0])?;
                let dst = self.new_frag(r.ty())?;
                let konst =
                    args[2].as_imm().and_then(Imm::as_i128).and_then(|s| u32::try_from(s).ok());
                if let (".shared", true, Some(s)) = (m.space, f.role != FragRole::Acc, konst) {
                    self.ldmatrix_const(&m, &args[1], s, layout, f.role, &dst)?;
                } else if m.space == ".shared" && f.role != FragRole::Acc {
                    let off = self.u32_reg(&args[1])?;
                    let stride = self.u32_reg(&args[2])?;
                    self.ldmatrix(&m, off, stride, layout, f.role, &dst);
                } else {
                    let off = self.u32_reg(&args[1])?;
                    let stride = self.u32_reg(&args[2])?;
                    let (_, g, t2) = self.lane();
                    for (d, elems) in dst.clone().iter().zip(elements(f.role, f.shape)) {
                        let mut halves = Vec::new();
                        for (rp, cp) in elems {
                            let (rr, cc) = (self.part(rp, g, t2), self.part(cp, g, t2));
                            let a = self.tile_addr(&m, off, stride, layout, rr, cc);
                            if f.role == FragRole::Acc {
                                self.ins(format_args!("ld{}.f32 {d}, [{a}]", m.space));
                            } else {
                                let h = self.fresh(Class::B16);
                                self.ins(format_args!("ld{}.b16 {h}, [{a}]", m.space));
                                halves.push(h);
                            }
                        }
                        if let [lo, hi] = halves[..] {
                            self.ins(format_args!("mov.b32 {d}, {{{lo}, {hi}}}"));
                        }
                    }
                }
                self.bind(r.name_arc(), Binding::Frag(dst));
            }
            MatrixOp::Store(layout) => {
                let f = args[3].ty().frag().ok_or("ill-formed kernel: frag_store operand")?;
                let m = mem_of(self, &args[0])?;
                let off = self.u32_reg(&args[1])?;
                let stride = self.u32_reg(&args[2])?;
                let src = self.frag_regs(&args[3])?;
                let (_, g, t2) = self.lane();
                for (s, elems) in src.iter().zip(elements(f.role, f.shape)) {
                    let (rp, cp) = elems[0];
                    let (rr, cc) = (self.part(rp, g, t2), self.part(cp, g, t2));
                    let a = self.tile_addr(&m, off, stride, layout, rr, cc);
                    self.ins(format_args!("st{}.f32 [{a}], {s}", m.space));
                }
            }
            MatrixOp::Fill => {
                let r = result.ok_or("ill-formed kernel: frag_fill without a result")?;
                let dst = self.new_frag(r.ty())?;
                let v = self.expr(&args[0], None)?;
                let acc = r.ty().frag().is_some_and(|f| f.role == FragRole::Acc);
                if acc {
                    for d in &dst {
                        self.mov(*d, &v);
                    }
                } else {
                    let h = self.reg(v, Class::B16);
                    for d in &dst {
                        self.ins(format_args!("mov.b32 {d}, {{{h}, {h}}}"));
                    }
                }
                self.bind(r.name_arc(), Binding::Frag(dst));
            }
            MatrixOp::Mma => {
                let r = result.ok_or("ill-formed kernel: mma without a result")?;
                let fa = args[0].ty().frag().ok_or("ill-formed kernel: mma operand")?;
                let t = if fa.elem == Scalar::BF16 { "bf16" } else { "f16" };
                let (a, b, c) = (
                    self.frag_regs(&args[0])?,
                    self.frag_regs(&args[1])?,
                    self.frag_regs(&args[2])?,
                );
                let d = self.new_frag(r.ty())?;
                let list =
                    |v: &[Reg]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
                for nb in 0..c.len() / 4 {
                    let (dd, cc, bb) =
                        (&d[4 * nb..4 * nb + 4], &c[4 * nb..4 * nb + 4], &b[2 * nb..2 * nb + 2]);
                    self.ins(format_args!(
                        "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}}",
                        list(dd),
                        list(&a),
                        list(bb),
                        list(cc)
                    ));
                }
                self.bind(r.name_arc(), Binding::Frag(d));
            }
            MatrixOp::CopyAsync(n) => {
                let dst = mem_of(self, &args[0])?;
                let src = mem_of(self, &args[2])?;
                let bytes = n as usize * dst.elem.size_bytes();
                let da = self.addr(&dst, &args[1])?;
                let sa = self.addr(&src, &args[3])?;
                let cache = if bytes == 16 { "cg" } else { "ca" };
                self.ins(format_args!("cp.async.{cache}.shared.global {da}, {sa}, {bytes}"));
            }
            MatrixOp::Commit => self.ins(format_args!("cp.async.commit_group")),
            MatrixOp::Wait(n) => self.ins(format_args!("cp.async.wait_group {n}")),
            _ => return self.warpgroup(op, result, args),
        }
        Ok(())
    }

    /// `ldmatrix` with a constant stride: the lane's element offset within the tile depends
    /// only on the lane and the stride, so it is computed once at entry (the k-loop of a
    /// GEMM issues one `ldmatrix` per two to four `mma`s, and per-load lane arithmetic would
    /// outnumber them); each load adds the tile's offset `off` and forms the address. An
    /// offset `(x + C) as u32` (`x` an i32, `C >= 0`) puts `C` in the address's immediate:
    /// the loads of one tile then share one address register.
    fn ldmatrix_const(
        &mut self,
        m: &Mem,
        off: &Expr,
        stride: u32,
        layout: Layout,
        role: FragRole,
        dst: &[Reg],
    ) -> R<()> {
        let (trans, lo_rows) = ldmatrix_form(role, layout);
        let key = (stride, dst.len(), lo_rows);
        let lane_off = match self.lane_offsets.get(&key) {
            Some(r) => *r,
            None => {
                let body = std::mem::take(&mut self.body);
                let (row, col_blk) = self.ldmatrix_lane(dst.len(), lo_rows);
                let o = self.fresh(Class::B32);
                self.ins(format_args!("mad.lo.u32 {o}, {row}, {stride}, {col_blk}"));
                let code = std::mem::replace(&mut self.body, body);
                self.entry.push_str(&code);
                self.lane_offsets.insert(key, o);
                o
            }
        };
        let size = m.elem.size_bytes() as i128;
        let split = match off.node() {
            ExprNode::Cast { to: Scalar::U32, a } if a.ty() == Type::I32 => {
                match self.split_offset(a)? {
                    Some(xc) => Some(xc),
                    None => Some((self.expr(a, None)?, 0)),
                }
            }
            _ => None,
        };
        let i = self.fresh(Class::B32);
        let a = self.fresh(Class::B64);
        let imm = match split.filter(|&(_, c)| c * size <= i32::MAX as i128) {
            // Every in-bounds offset is a small non-negative `x + C`, so `lane + x` is exact in
            // s32 (x may be negative) and the sign-extended address plus `C` is the element's.
            Some((x, c)) => {
                let x = self.reg(x, Class::B32);
                self.ins(format_args!("add.s32 {i}, {lane_off}, {x}"));
                self.ins(format_args!("mad.wide.s32 {a}, {i}, {size}, {}", m.base));
                c * size
            }
            None => {
                let off = self.u32_reg(off)?;
                self.ins(format_args!("add.u32 {i}, {lane_off}, {off}"));
                self.ins(format_args!("mad.wide.u32 {a}, {i}, {size}, {}", m.base));
                0
            }
        };
        self.ldmatrix_issue(dst, trans, a, imm);
        Ok(())
    }

    /// `ldmatrix` of an `a` or `b` tile from shared memory into `dst`: lane `l` gives the
    /// address of row `l % 8` of 8x8 matrix `l / 8`, matrix `j` landing in register `j`.
    fn ldmatrix(
        &mut self,
        m: &Mem,
        off: Reg,
        stride: Reg,
        layout: Layout,
        role: FragRole,
        dst: &[Reg],
    ) {
        let (trans, lo_rows) = ldmatrix_form(role, layout);
        let (row, col_blk) = self.ldmatrix_lane(dst.len(), lo_rows);
        let a = self.tile_addr(m, off, stride, Layout::Row, row, col_blk);
        self.ldmatrix_issue(dst, trans, a, 0);
    }

    /// The row and the column block, in the tile as stored, whose address this lane gives to
    /// an `ldmatrix` of `regs` 8x8 matrices: row `lane % 8` of matrix `j = lane / 8`, whose
    /// two block indices (`j & 1`, `j >> 1`, times 8) pick rows and columns (`lo_rows`: the
    /// first picks rows).
    fn ldmatrix_lane(&mut self, regs: usize, lo_rows: bool) -> (Reg, Reg) {
        let (lane, _, _) = self.lane();
        let r = self.fresh(Class::B32);
        self.ins(format_args!("and.b32 {r}, {lane}, 7"));
        let j = self.fresh(Class::B32);
        self.ins(format_args!("shr.u32 {j}, {lane}, 3"));
        if regs == 2 {
            // .x2: lanes 0..15 give the addresses; the others repeat them.
            self.ins(format_args!("and.b32 {j}, {j}, 1"));
        }
        let lo = self.fresh(Class::B32);
        self.ins(format_args!("and.b32 {lo}, {j}, 1"));
        self.ins(format_args!("shl.b32 {lo}, {lo}, 3"));
        let hi = self.fresh(Class::B32);
        self.ins(format_args!("shr.u32 {hi}, {j}, 1"));
        self.ins(format_args!("shl.b32 {hi}, {hi}, 3"));
        let (row_blk, col_blk) = if lo_rows { (lo, hi) } else { (hi, lo) };
        let row = self.fresh(Class::B32);
        self.ins(format_args!("add.u32 {row}, {row_blk}, {r}"));
        (row, col_blk)
    }

    /// The `ldmatrix` instruction itself, lane addresses `a + imm` (bytes).
    fn ldmatrix_issue(&mut self, dst: &[Reg], trans: bool, a: Reg, imm: i128) {
        let n = if dst.len() == 2 { "x2" } else { "x4" };
        let t = if trans { ".trans" } else { "" };
        let list = dst.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
        let at = if imm == 0 { format!("[{a}]") } else { format!("[{a}+{imm}]") };
        self.ins(format_args!("ldmatrix.sync.aligned.m8n8.{n}{t}.shared.b16 {{{list}}}, {at}"));
    }
}

/// How `ldmatrix` reads an `a` or `b` tile stored in `layout`: whether with `.trans`, and
/// whether the lane's first 8x8 block index picks rows of the stored tile.
fn ldmatrix_form(role: FragRole, layout: Layout) -> (bool, bool) {
    match (role, layout) {
        (FragRole::A, Layout::Row) => (false, true),
        (FragRole::A, Layout::Col) => (true, false),
        (_, Layout::Col) => (false, false),
        (_, Layout::Row) => (true, true),
    }
}
