//! Instruction selection: structured IR to machine IR. Uniform integer values go to SALU and
//! SGPRs, divergent values and all floating point to VALU and VGPRs, as the divergence
//! analysis says; divergent `if`s and loops become exec-mask code.

use std::collections::{HashMap, HashSet};

use kiln_ir::{
    AddrSpace, BinOp, Builtin, Expr, ExprNode, FuncKind, Imm, Intrinsic, Kernel, Scalar, Stmt,
    StmtNode, UnOp, Var,
};
use kiln_passes::divergence::{Divergence, VarSet};

use super::mir::{Inst, Label, LoopRange, MFunc, Opnd, PReg, RegClass, GROUP_ID_SGPR};
use super::Error;

mod arith;
mod atomic;
mod convert;
mod divide;
mod intrin;
mod memory;
mod vector;
mod wide;

pub use memory::MAX_PRIVATE;
pub(super) use wide::{hi, is_wide, lo};

/// A computed value: an operand and whether it lives in SGPRs (`true`) or VGPRs.
#[derive(Clone, Debug)]
struct Val {
    o: Opnd,
    s: bool,
}

struct Isel<'a> {
    f: MFunc,
    div: &'a Divergence,
    cur: VarSet,
    env: HashMap<Var, Val>,
    params: HashMap<Var, (Opnd, u32)>,
    lds: HashMap<Var, u32>,
    /// Private arrays promoted to registers: one VGPR (or pair) per element.
    privs: HashMap<Var, Vec<Opnd>>,
    /// Private arrays in scratch memory: their byte offset in each lane's private segment.
    scratch: HashMap<Var, u32>,
    force_v: HashSet<Var>,
    smem_ok: bool,
    /// The lanes of each vector `let` (a vector load; see `isel/vector.rs`).
    vecs: HashMap<Var, Vec<Val>>,
}

/// Why a vector construct reaches instruction selection: the driver lowers them first.
const VECTORS: &str = "vector values: lower them with kiln_passes::vectors::scalarize_vectors \
                       first (the build driver does, as the target's lowering says)";

fn unsupported<T>(what: impl Into<String>) -> Result<T, Error> {
    Err(Error::Unsupported(what.into()))
}

/// Every scalar type has a representation: bool, 8/16/32-bit integers in one 32-bit register
/// (8/16-bit ones kept sign- or zero-extended), f16 as its bits and f32 in one register, and
/// i64/u64/f64 in a VGPR pair.
fn check_scalar(_: Scalar) -> Result<(), Error> {
    Ok(())
}

/// Variables assigned under divergent control flow entered after their declaration: they
/// need VGPRs, since an SGPR write would also change the value of inactive lanes.
fn vars_needing_vgprs(k: &Kernel, div: &Divergence) -> HashSet<Var> {
    fn go(
        s: &Stmt,
        div: &Divergence,
        depth: usize,
        decl: &mut HashMap<Var, usize>,
        out: &mut HashSet<Var>,
    ) {
        match s.node() {
            StmtNode::Decl { var, .. } => {
                decl.insert(var.clone(), depth);
            }
            StmtNode::Assign { var, .. } if decl.get(var).is_none_or(|&d| depth > d) => {
                out.insert(var.clone());
            }
            StmtNode::Block(v) => v.iter().for_each(|c| go(c, div, depth, decl, out)),
            StmtNode::If { then, otherwise, .. } => {
                let d = depth + usize::from(div.branch_divergent(s) != Some(false));
                go(then, div, d, decl, out);
                if let Some(o) = otherwise {
                    go(o, div, d, decl, out);
                }
            }
            StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                let d = depth + usize::from(div.branch_divergent(s) != Some(false));
                go(body, div, d, decl, out);
            }
            _ => {}
        }
    }
    let mut out = HashSet::new();
    go(k.body(), div, 0, &mut HashMap::new(), &mut out);
    out
}

fn has_global_writes(s: &Stmt) -> bool {
    match s.node() {
        StmtNode::Store { buf, .. } => buf.ty().addr_space() != Some(AddrSpace::Local),
        StmtNode::Call { func, .. } => matches!(func.kind(), FuncKind::Atomic(_)),
        StmtNode::Block(v) => v.iter().any(has_global_writes),
        StmtNode::If { then, otherwise, .. } => {
            has_global_writes(then) || otherwise.as_ref().is_some_and(has_global_writes)
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => has_global_writes(body),
        _ => false,
    }
}

/// Lowers a kernel to machine IR with virtual registers.
pub fn select(k: &Kernel, div: &Divergence) -> Result<MFunc, Error> {
    let mut i = Isel {
        f: MFunc { name: k.name().to_string(), ..MFunc::default() },
        div,
        cur: VarSet::new(),
        env: HashMap::new(),
        params: HashMap::new(),
        lds: HashMap::new(),
        privs: HashMap::new(),
        scratch: HashMap::new(),
        force_v: vars_needing_vgprs(k, div),
        smem_ok: !has_global_writes(k.body()),
        vecs: HashMap::new(),
    };
    i.entry(k)?;
    for s in k.body().stmts() {
        i.stmt(s)?;
    }
    i.emit("s_endpgm", vec![], vec![]);
    Ok(i.f)
}

impl Isel<'_> {
    fn emit(&mut self, op: &'static str, defs: Vec<Opnd>, uses: Vec<Opnd>) {
        self.f.insts.push(Inst { op, defs, uses });
    }
    fn vreg(&mut self, c: RegClass) -> Opnd {
        Opnd::R(self.f.vregs.push(c))
    }
    fn s(&mut self) -> Opnd {
        self.vreg(RegClass::S)
    }
    fn v(&mut self) -> Opnd {
        self.vreg(RegClass::V)
    }
    fn s2(&mut self) -> Opnd {
        self.vreg(RegClass::S2)
    }
    fn label(&mut self) -> Label {
        self.f.labels.push(())
    }
    fn place(&mut self, l: Label) {
        self.emit("label", vec![], vec![Opnd::L(l)]);
    }
    fn kernarg() -> Opnd {
        Opnd::P(PReg::S2(0))
    }

    fn vgpr(&mut self, x: Val) -> Opnd {
        if !x.s && !matches!(x.o, Opnd::Imm(_)) {
            return x.o;
        }
        let d = self.v();
        self.emit("v_mov_b32", vec![d.clone()], vec![x.o]);
        d
    }
    /// Two SALU sources: immediates stay immediates (SOP2/SOPC take one 32-bit literal and
    /// any inline constants), everything else goes to SGPRs.
    fn salu_pair(&mut self, a: Val, b: Val) -> (Opnd, Opnd) {
        let literal = |o: &Opnd| matches!(o, Opnd::Imm(x) if !(-16..=64).contains(&(*x as i32)));
        let two_literals = literal(&a.o) && literal(&b.o);
        let a = if matches!(a.o, Opnd::Imm(_)) && !two_literals { a.o } else { self.sgpr(a) };
        let b = if matches!(b.o, Opnd::Imm(_)) { b.o } else { self.sgpr(b) };
        (a, b)
    }

    fn sgpr(&mut self, x: Val) -> Opnd {
        if x.s && !matches!(x.o, Opnd::Imm(_)) {
            return x.o;
        }
        let d = self.s();
        if x.s {
            self.emit("s_mov_b32", vec![d.clone()], vec![x.o]);
        } else {
            self.emit("v_readfirstlane_b32", vec![d.clone()], vec![x.o]);
        }
        d
    }
    /// Converts to the wanted class.
    fn to(&mut self, x: Val, s: bool) -> Val {
        if self.is_wide_val(&x) {
            return if s {
                Val { o: self.sgpr64(x), s: true }
            } else {
                Val { o: self.w(x), s: false }
            };
        }
        if s {
            Val { o: self.sgpr(x), s: true }
        } else {
            Val { o: self.vgpr(x), s: false }
        }
    }

    /// True if the value of `e` should live in SGPRs here.
    fn wants_s(&self, e: &Expr) -> bool {
        !e.ty().is_float() && !self.div.expr_divergent_in(e, &self.cur)
    }

    fn ty(e: &Expr) -> Result<Scalar, Error> {
        let s = e.ty().scalar().ok_or_else(|| Error::Unsupported("pointer value".into()))?;
        check_scalar(s)?;
        Ok(s)
    }

    fn expr(&mut self, e: &Expr) -> Result<Val, Error> {
        let ty = Self::ty(e)?;
        let s = self.wants_s(e);
        match e.node() {
            ExprNode::Var(v) => {
                let x = self.env.get(v).cloned().ok_or_else(|| {
                    Error::Unsupported(format!("variable `{}` not in a register", v.name()))
                })?;
                Ok(self.to(x, s))
            }
            ExprNode::Imm(i) => {
                if is_wide(ty) {
                    let bits = match i {
                        Imm::Float(_, f) => f.to_bits(),
                        Imm::Int(_, b) => *b,
                        Imm::Bool(b) => u64::from(*b),
                    };
                    if s {
                        let d = self.s2();
                        self.emit("s_mov_b32", vec![lo(&d)], vec![Opnd::Imm(bits as u32)]);
                        self.emit("s_mov_b32", vec![hi(&d)], vec![Opnd::Imm((bits >> 32) as u32)]);
                        return Ok(Val { o: d, s: true });
                    }
                    return Ok(Val { o: self.const64(bits), s: false });
                }
                let bits = match i {
                    Imm::Bool(b) => u32::from(*b),
                    Imm::Int(_, b) => *b as u32,
                    Imm::Float(..) => i.to_bits() as u32,
                };
                if s {
                    return Ok(Val { o: Opnd::Imm(bits), s: true });
                }
                Ok(self.to(Val { o: Opnd::Imm(bits), s: true }, s))
            }
            ExprNode::Builtin { kind, dim } => self.builtin(*kind, *dim, s),
            ExprNode::Load { buf, index } => self.load(buf, index, s),
            ExprNode::Unary { op, a } => {
                let a = self.expr(a)?;
                if is_wide(ty) {
                    return Ok(self.unary64(ty, *op, a, s));
                }
                let r = match (op, ty.is_float()) {
                    (UnOp::Neg, true) => self.vop("v_xor_b32", Opnd::Imm(0x8000_0000), a),
                    (UnOp::Neg, false) => self.bin2(s, "s_sub_i32", "v_sub_u32", imm(0), a),
                    (UnOp::Not, _) => self.bin2(s, "s_xor_b32", "v_xor_b32", imm(1), a),
                    (UnOp::BitNot, _) => self.un(s, "s_not_b32", "v_not_b32", a),
                }?;
                Ok(self.norm(ty, r))
            }
            ExprNode::Binary { op, a, b } => self.binary(*op, a, b, s),
            ExprNode::Select { cond, a, b } => {
                let c = self.expr(cond)?;
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if is_wide(ty) && s {
                    let (c, a, b) = (self.sgpr(c), self.sgpr64(a), self.sgpr64(b));
                    let d = self.s2();
                    self.emit("s_cmp_lg_u32", vec![], vec![c, Opnd::Imm(0)]);
                    self.emit("s_cselect_b64", vec![d.clone()], vec![a, b]);
                    return Ok(Val { o: d, s: true });
                }
                if is_wide(ty) {
                    let m = self.mask(c)?;
                    let (a, b) = (self.w(a), self.w(b));
                    return Ok(Val { o: self.sel64(m, b, a), s: false });
                }
                if s {
                    let (c, a, b) = (self.sgpr(c), self.sgpr(a), self.sgpr(b));
                    let d = self.s();
                    self.emit("s_cmp_lg_u32", vec![], vec![c, Opnd::Imm(0)]);
                    self.emit("s_cselect_b32", vec![d.clone()], vec![a, b]);
                    Ok(Val { o: d, s: true })
                } else {
                    let m = self.mask(c)?;
                    let (a, b) = (self.vgpr(a), self.vgpr(b));
                    let d = self.v();
                    self.emit("v_cndmask_b32_e64", vec![d.clone()], vec![b, a, m]);
                    Ok(Val { o: d, s: false })
                }
            }
            ExprNode::Cast { to, a } => self.cast(*to, a, s),
            ExprNode::Intrinsic { op: op @ (Intrinsic::Mad | Intrinsic::Add3), args } => {
                let [a, b, c] = [&args[0], &args[1], &args[2]];
                if *op == Intrinsic::Add3 && !s && matches!(ty, Scalar::I32 | Scalar::U32) {
                    // 32-bit registers wrap exactly as the IR does.
                    let ops = vec![self.expr(a)?, self.expr(b)?, self.expr(c)?];
                    let ops = ops.into_iter().map(|x| self.vgpr(x)).collect();
                    let d = self.v();
                    self.emit("v_add3_u32", vec![d.clone()], ops);
                    return Ok(Val { o: d, s: false });
                }
                // Every other width and the SALU: the same wrapping sum as separate ops,
                // which already re-extend narrow integers.
                let first = if *op == Intrinsic::Mad { BinOp::Mul } else { BinOp::Add };
                self.expr(&Expr::binary(
                    BinOp::Add,
                    Expr::binary(first, a.clone(), b.clone()),
                    c.clone(),
                ))
            }
            ExprNode::Extract { a, lane } => self.extract(a, *lane),
            ExprNode::VecLoad { .. } | ExprNode::Insert { .. } | ExprNode::Vector { .. } => {
                Err(Error::Unsupported(VECTORS.into()))
            }
            ExprNode::Intrinsic { op, args } => {
                let mut vals: Vec<Val> =
                    args.iter().map(|a| self.expr(a)).collect::<Result<_, _>>()?;
                if is_wide(ty) {
                    // The 64-bit intrinsics are VALU sequences.
                    vals = vals.into_iter().map(|x| Val { o: self.w(x), s: false }).collect();
                }
                let r = self.intrinsic(*op, ty, vals, s)?;
                Ok(self.to(r, s))
            }
        }
    }

    fn un(&mut self, s: bool, so: &'static str, vo: &'static str, a: Val) -> Result<Val, Error> {
        if s {
            let a = self.sgpr(a);
            let d = self.s();
            self.emit(so, vec![d.clone()], vec![a]);
            Ok(Val { o: d, s: true })
        } else {
            let a = self.vgpr(a);
            let d = self.v();
            self.emit(vo, vec![d.clone()], vec![a]);
            Ok(Val { o: d, s: false })
        }
    }

    /// A VALU op `vo d, x, a` with an immediate or register first source.
    fn vop(&mut self, vo: &'static str, x: Opnd, a: Val) -> Result<Val, Error> {
        let a = self.vgpr(a);
        let d = self.v();
        self.emit(vo, vec![d.clone()], vec![x, a]);
        Ok(Val { o: d, s: false })
    }

    /// `so d, x, a` on SALU or `vo d, x, a` on VALU, `x` an immediate.
    fn bin2(
        &mut self,
        s: bool,
        so: &'static str,
        vo: &'static str,
        x: Val,
        a: Val,
    ) -> Result<Val, Error> {
        self.bin(s, so, vo, x, a)
    }

    fn bin(
        &mut self,
        s: bool,
        so: &'static str,
        vo: &'static str,
        a: Val,
        b: Val,
    ) -> Result<Val, Error> {
        if s {
            let (a, b) = self.salu_pair(a, b);
            let d = self.s();
            self.emit(so, vec![d.clone()], vec![a, b]);
            Ok(Val { o: d, s: true })
        } else {
            // VOP2 encodings take an SGPR, inline constant or literal as src0 (one use of the
            // constant bus); src1 and every VOP3 source here must be VGPRs.
            const VOP2: [&str; 15] = [
                "v_add_u32",
                "v_sub_u32",
                "v_and_b32",
                "v_or_b32",
                "v_xor_b32",
                "v_lshlrev_b32",
                "v_lshrrev_b32",
                "v_ashrrev_i32",
                "v_min_i32",
                "v_max_i32",
                "v_min_u32",
                "v_max_u32",
                "v_add_f32",
                "v_sub_f32",
                "v_mul_f32",
            ];
            const COMMUTATIVE: [&str; 10] = [
                "v_add_u32",
                "v_and_b32",
                "v_or_b32",
                "v_xor_b32",
                "v_min_i32",
                "v_max_i32",
                "v_min_u32",
                "v_max_u32",
                "v_add_f32",
                "v_mul_f32",
            ];
            let scalar = |v: &Val| v.s || matches!(v.o, Opnd::Imm(_));
            let (a, b) = if VOP2.contains(&vo) && scalar(&a) {
                (a.o, self.vgpr(b))
            } else if COMMUTATIVE.contains(&vo) && scalar(&b) && !scalar(&a) {
                (b.o, a.o)
            } else {
                (self.vgpr(a), self.vgpr(b))
            };
            let d = self.v();
            self.emit(vo, vec![d.clone()], vec![a, b]);
            Ok(Val { o: d, s: false })
        }
    }

    /// A lane mask (SGPR pair) of the lanes where the bool `c` is true.
    fn mask(&mut self, c: Val) -> Result<Opnd, Error> {
        let c = self.vgpr(c);
        let m = self.s2();
        self.emit("v_cmp_ne_u32_e64", vec![m.clone()], vec![Opnd::Imm(0), c]);
        Ok(m)
    }

    fn bool_from_mask(&mut self, m: Opnd) -> Val {
        let d = self.v();
        self.emit("v_cndmask_b32_e64", vec![d.clone()], vec![Opnd::Imm(0), Opnd::Imm(1), m]);
        Val { o: d, s: false }
    }

    fn builtin(&mut self, kind: Builtin, dim: u8, s: bool) -> Result<Val, Error> {
        let d = dim as u32;
        let hidden = |me: &mut Self, slot: u32| {
            let r = me.s();
            let off = me.f.hidden_offset + 4 * slot;
            me.emit("s_load_dword", vec![r.clone()], vec![Self::kernarg(), Opnd::Imm(off)]);
            me.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
            Val { o: r, s: true }
        };
        let r = match kind {
            Builtin::LocalId => Val { o: Opnd::P(PReg::V(dim)), s: false },
            Builtin::GroupId => Val { o: Opnd::P(PReg::S(GROUP_ID_SGPR + dim)), s: true },
            Builtin::GlobalOffset => hidden(self, d),
            Builtin::LocalSize => hidden(self, 3 + d),
            Builtin::GlobalSize => hidden(self, 6 + d),
            Builtin::NumGroups => hidden(self, 9 + d),
            Builtin::GlobalId => {
                let ls = hidden(self, 3 + d);
                let off = hidden(self, d);
                let g = Val { o: Opnd::P(PReg::S(GROUP_ID_SGPR + dim)), s: true };
                let t = self.bin(true, "s_mul_i32", "", g, ls)?;
                let t = self.bin(true, "s_add_i32", "", t, off)?;
                let l = Val { o: Opnd::P(PReg::V(dim)), s: false };
                self.bin(false, "", "v_add_u32", t, l)?
            }
        };
        Ok(self.to(r, s))
    }

    fn set_cur(&mut self, s: &Stmt) {
        self.cur = self.div.divergent_before(s);
    }

    fn var_class_s(&self, s: &Stmt, var: &Var) -> bool {
        !var.ty().is_float()
            && !self.force_v.contains(var)
            && !self.div.ever_divergent(var)
            && self.div.binding_divergent(s) == Some(false)
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), Error> {
        self.set_cur(s);
        match s.node() {
            StmtNode::Let { var, value } if var.ty().is_vector() => {
                let lanes = match value.node() {
                    ExprNode::VecLoad { buf, index, lanes } => self.vec_load(buf, index, *lanes)?,
                    ExprNode::Var(v) => self
                        .vecs
                        .get(v)
                        .cloned()
                        .ok_or_else(|| Error::Unsupported(VECTORS.into()))?,
                    _ => return Err(Error::Unsupported(VECTORS.into())),
                };
                self.vecs.insert(var.clone(), lanes);
            }
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                let is_let = matches!(s.node(), StmtNode::Let { .. });
                let x = self.expr(value)?;
                if var.ty().scalar().is_some_and(is_wide) {
                    let cls = var.ty().scalar() != Some(Scalar::F64)
                        && if is_let {
                            self.div.binding_divergent(s) == Some(false)
                        } else {
                            self.var_class_s(s, var)
                        };
                    let r = if cls {
                        let (r, x) = (self.s2(), self.sgpr64(x));
                        self.emit("s_mov_b64", vec![r.clone()], vec![x]);
                        r
                    } else {
                        let r = self.v2();
                        self.copy64(&r, &x.o);
                        r
                    };
                    self.env.insert(var.clone(), Val { o: r, s: cls });
                    return Ok(());
                }
                let cls = if is_let {
                    !var.ty().is_float() && self.div.binding_divergent(s) == Some(false)
                } else {
                    self.var_class_s(s, var)
                };
                let x = self.to(x, cls);
                let r = if cls { self.s() } else { self.v() };
                let op = if cls { "s_mov_b32" } else { "v_mov_b32" };
                self.emit(op, vec![r.clone()], vec![x.o]);
                self.env.insert(var.clone(), Val { o: r, s: cls });
            }
            StmtNode::Assign { var, value } => {
                let x = self.expr(value)?;
                let dst = self.env[var].clone();
                if var.ty().scalar().is_some_and(is_wide) {
                    if dst.s {
                        let x = self.sgpr64(x);
                        self.emit("s_mov_b64", vec![dst.o], vec![x]);
                    } else {
                        self.copy64(&dst.o, &x.o);
                    }
                    return Ok(());
                }
                let x = self.to(x, dst.s);
                let op = if dst.s { "s_mov_b32" } else { "v_mov_b32" };
                self.emit(op, vec![dst.o], vec![x.o]);
            }
            StmtNode::Store { buf, index, value } => self.store(buf, index, value)?,
            StmtNode::Alloc { var, count } => self.alloc(var, *count)?,
            StmtNode::Block(v) => {
                for c in v {
                    self.stmt(c)?;
                }
            }
            StmtNode::VecStore { buf, index, value } => self.vec_store(buf, index, value)?,
            StmtNode::Call { func, result, args } => match func.kind() {
                FuncKind::Barrier(_) => {
                    self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0) lgkmcnt(0)")]);
                    self.emit("s_barrier", vec![], vec![]);
                }
                FuncKind::Fence(_) => {
                    self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0) lgkmcnt(0)")]);
                }
                FuncKind::Atomic(op) => self.atomic(op, result.as_ref(), args)?,
                FuncKind::Matrix(op) => {
                    return unsupported(format!("matrix operation `{}`", op.name()))
                }
            },
            StmtNode::If { cond, then, otherwise } => {
                let c = self.expr(cond)?;
                let (l_else, l_end) = (self.label(), self.label());
                if self.div.branch_divergent(s) == Some(false) {
                    let c = self.sgpr(c);
                    self.emit("s_cmp_lg_u32", vec![], vec![c, Opnd::Imm(0)]);
                    self.emit("s_cbranch_scc0", vec![], vec![Opnd::L(l_else)]);
                    self.stmt(then)?;
                    self.emit("s_branch", vec![], vec![Opnd::L(l_end)]);
                    self.place(l_else);
                    if let Some(o) = otherwise {
                        self.stmt(o)?;
                    }
                    self.place(l_end);
                } else {
                    let m = self.mask(c)?;
                    let save = self.s2();
                    self.emit("s_and_saveexec_b64", vec![save.clone()], vec![m]);
                    self.emit("s_xor_b64", vec![save.clone()], vec![Opnd::Exec, save.clone()]);
                    self.emit("s_cbranch_execz", vec![], vec![Opnd::L(l_else)]);
                    self.stmt(then)?;
                    self.place(l_else);
                    self.emit("s_or_saveexec_b64", vec![save.clone()], vec![save.clone()]);
                    self.emit("s_xor_b64", vec![Opnd::Exec], vec![Opnd::Exec, save.clone()]);
                    self.emit("s_cbranch_execz", vec![], vec![Opnd::L(l_end)]);
                    if let Some(o) = otherwise {
                        self.stmt(o)?;
                    }
                    self.place(l_end);
                    self.emit("s_or_b64", vec![Opnd::Exec], vec![Opnd::Exec, save]);
                }
            }
            StmtNode::While { cond, body } => {
                let uniform = self.div.branch_divergent(s) == Some(false);
                let head_state = self.div.loop_head_divergent(s);
                self.lower_loop(
                    uniform,
                    |me| {
                        me.cur = head_state.clone();
                        me.expr(cond)
                    },
                    |me| me.stmt(body),
                )?;
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let ty = var.ty().scalar().unwrap_or(Scalar::I32);
                if is_wide(ty) {
                    return self.for64(s, ty, var, lo, hi, step, body);
                }
                let uniform = self.div.branch_divergent(s) == Some(false);
                // 8/16-bit counters are kept extended, so 32-bit compares order them right.
                let signed = ty.is_signed();
                let cs =
                    self.div.binding_divergent(s) == Some(false) && !self.force_v.contains(var);
                let lo = self.expr(lo)?;
                let hi = self.expr(hi)?;
                let st = self.expr(step)?;
                let (hi, st) = (self.to(hi, uniform), self.to(st, uniform));
                let lo = self.to(lo, cs);
                let iv = if cs { self.s() } else { self.v() };
                self.emit(if cs { "s_mov_b32" } else { "v_mov_b32" }, vec![iv.clone()], vec![lo.o]);
                let ivv = Val { o: iv.clone(), s: cs };
                // go = iv < hi
                let go = self.cmp(uniform, signed, "lt", ivv.clone(), hi.clone())?;
                let gr = if uniform { self.s() } else { self.v() };
                let mv = if uniform { "s_mov_b32" } else { "v_mov_b32" };
                self.emit(mv, vec![gr.clone()], vec![go.o]);
                let grv = Val { o: gr.clone(), s: uniform };
                self.env.insert(var.clone(), ivv.clone());
                self.lower_loop(
                    uniform,
                    |_| Ok(grv.clone()),
                    |me| {
                        me.stmt(body)?;
                        // go = (hi - iv) >u step; iv += step (no wrap-around past hi)
                        let diff =
                            me.bin(uniform, "s_sub_i32", "v_sub_u32", hi.clone(), ivv.clone())?;
                        let g = me.cmp(uniform, false, "gt", diff, st.clone())?;
                        me.emit(mv, vec![gr.clone()], vec![g.o]);
                        let n = me.bin(cs, "s_add_i32", "v_add_u32", ivv.clone(), st.clone())?;
                        let n = me.to(n, cs);
                        me.emit(
                            if cs { "s_mov_b32" } else { "v_mov_b32" },
                            vec![iv.clone()],
                            vec![n.o],
                        );
                        Ok(())
                    },
                )?;
            }
        }
        Ok(())
    }

    pub(super) fn cmp(
        &mut self,
        s: bool,
        signed: bool,
        op: &str,
        a: Val,
        b: Val,
    ) -> Result<Val, Error> {
        let (so, vo) = match (op, signed) {
            ("lt", true) => ("s_cmp_lt_i32", "v_cmp_lt_i32_e64"),
            ("lt", false) => ("s_cmp_lt_u32", "v_cmp_lt_u32_e64"),
            _ => ("s_cmp_gt_u32", "v_cmp_gt_u32_e64"),
        };
        if s {
            let (a, b) = self.salu_pair(a, b);
            self.emit(so, vec![], vec![a, b]);
            let d = self.s();
            self.emit("s_cselect_b32", vec![d.clone()], vec![Opnd::Imm(1), Opnd::Imm(0)]);
            Ok(Val { o: d, s: true })
        } else {
            let (a, b) = (self.vgpr(a), self.vgpr(b));
            let m = self.s2();
            self.emit(vo, vec![m.clone()], vec![a, b]);
            Ok(self.bool_from_mask(m))
        }
    }

    /// A loop: `cond` is evaluated at the head, `body` runs while it holds. A uniform exit
    /// branches on SCC; a divergent one retires lanes from exec until none is left.
    pub(super) fn lower_loop(
        &mut self,
        uniform: bool,
        cond: impl FnOnce(&mut Self) -> Result<Val, Error>,
        body: impl FnOnce(&mut Self) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let (head, exit) = (self.label(), self.label());
        let brk = if uniform {
            None
        } else {
            let b = self.s2();
            self.emit("s_mov_b64", vec![b.clone()], vec![Opnd::Imm(0)]);
            Some(b)
        };
        let start = self.f.insts.len();
        self.place(head);
        let c = cond(self)?;
        if let Some(b) = &brk {
            let m = self.mask(c)?;
            let t = self.s2();
            self.emit("s_andn2_b64", vec![t.clone()], vec![Opnd::Exec, m]);
            self.emit("s_or_b64", vec![b.clone()], vec![b.clone(), t]);
            self.emit("s_andn2_b64", vec![Opnd::Exec], vec![Opnd::Exec, b.clone()]);
            self.emit("s_cbranch_execz", vec![], vec![Opnd::L(exit)]);
        } else {
            let c = self.sgpr(c);
            self.emit("s_cmp_lg_u32", vec![], vec![c, Opnd::Imm(0)]);
            self.emit("s_cbranch_scc0", vec![], vec![Opnd::L(exit)]);
        }
        body(self)?;
        let end = self.f.insts.len();
        self.emit("s_branch", vec![], vec![Opnd::L(head)]);
        self.f.loops.push(LoopRange { head: start, end });
        self.place(exit);
        if let Some(b) = brk {
            self.emit("s_or_b64", vec![Opnd::Exec], vec![Opnd::Exec, b]);
        }
        Ok(())
    }
}

fn imm(v: u32) -> Val {
    Val { o: Opnd::Imm(v), s: true }
}

fn two(v: Vec<Val>) -> [Val; 2] {
    let mut it = v.into_iter();
    // Callers pass the operands of verified two-operand nodes.
    let mut next = || it.next().expect("a two-operand node (checked by the verifier)");
    [next(), next()]
}
