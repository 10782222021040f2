//! Expression lowering, preserving the interpreter's semantics exactly.

use rspirv::dr::Operand;
use rspirv::spirv::{CLOp, GLOp, StorageClass, Word};

use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, Scalar, UnOp};

use super::ctx::Ctx;
use super::stmt::{int_of_bits, Emitter, Val};
use super::Flavour;

type R<T> = Result<T, String>;

fn er(e: rspirv::dr::Error) -> String {
    e.to_string()
}

/// Marks a float result `NoContraction` (Vulkan): the driver may then neither fuse it into
/// an fma nor apply value-changing algebra such as `x * 0.0 -> 0.0` or `x + 0.0 -> x`
/// (both wrong for -0.0, NaN and infinities).
fn exact(cx: &mut Ctx, id: Word) {
    if cx.flavour == Flavour::Vulkan {
        cx.b.decorate(id, rspirv::spirv::Decoration::NoContraction, []);
    }
}

impl Emitter {
    /// Lowers an expression; returns its id and IR type.
    pub(crate) fn expr(&mut self, cx: &mut Ctx, x: &Expr) -> R<(Word, Scalar)> {
        let t = x.ty().scalar().ok_or("pointer-valued expressions are not supported")?;
        let v = match x.node() {
            ExprNode::Var(v) => match self.lookup(v)? {
                Val::Ssa(id) => id,
                Val::Mut(p, s) => {
                    let ty = cx.ty(s);
                    cx.b.load(ty, None, p, None, []).map_err(er)?
                }
                Val::Ptr(..) => return Err(format!("pointer `{}` used as a value", v.name())),
                Val::Vector(_) => return Err(super::VECTORS.into()),
                Val::Frag(_) | Val::FragMut(_) => {
                    return Err(format!("fragment `{}` used as a scalar", v.name()))
                }
            },
            ExprNode::Imm(i) => match *i {
                Imm::Bool(b) => cx.bool_const(b),
                Imm::Int(s, bits) => cx.constant(s, bits),
                Imm::Float(s, f)
                    if (f == 0.0 || f.is_nan())
                        && s != Scalar::F16
                        && self.opaque_zero.is_some() =>
                {
                    // ±0.0 and NaNs built at run time from their bits (see
                    // `Emitter::opaque_zero`): besides lavapipe's folding of zeros, NVIDIA's
                    // compiler quiets a signalling NaN constant (0x7fb00003 became 0x7ff00003),
                    // and kiln's constants keep every bit.
                    let z = self.opaque_zero.expect("checked");
                    let is = int_of_bits(s.bits());
                    let it = cx.ty(is);
                    let z = if is == Scalar::U32 {
                        z
                    } else {
                        cx.b.u_convert(it, None, z).map_err(er)?
                    };
                    let bits = cx.constant(is, kiln_ir::expr::float_to_bits(s, f));
                    let v = cx.b.bitwise_or(it, None, z, bits).map_err(er)?;
                    let ft = cx.ty(s);
                    cx.b.bitcast(ft, None, v).map_err(er)?
                }
                Imm::Float(s, f) => cx.float_const(s, f),
            },
            ExprNode::Unary { op, a } => {
                let (a, at) = self.expr(cx, a)?;
                let ty = cx.ty(at);
                if at.is_float() && *op == UnOp::Neg {
                    // A sign-bit flip: `OpFNegate` need not keep a NaN's payload, and kiln's
                    // `-` does (a signalling NaN stays signalling).
                    let is = int_of_bits(at.bits());
                    let it = cx.ty(is);
                    let xi = cx.b.bitcast(it, None, a).map_err(er)?;
                    let sign = cx.constant(is, 1u64 << (at.bits() - 1));
                    let r = cx.b.bitwise_xor(it, None, xi, sign).map_err(er)?;
                    return Ok((cx.b.bitcast(ty, None, r).map_err(er)?, t));
                }
                match op {
                    UnOp::Neg => cx.b.s_negate(ty, None, a),
                    UnOp::Not => cx.b.logical_not(ty, None, a),
                    UnOp::BitNot if at == Scalar::Bool => cx.b.logical_not(ty, None, a),
                    UnOp::BitNot => cx.b.not(ty, None, a),
                }
                .map_err(er)?
            }
            ExprNode::Binary { op, a, b } => {
                let (a, at) = self.expr(cx, a)?;
                let (b, _) = self.expr(cx, b)?;
                if cx.flavour == Flavour::Vulkan && at == Scalar::F32 && *op == BinOp::Div {
                    // Vulkan's OpFDiv is only 2.5 ULP: a correctly rounded sequence.
                    return Ok((self.vulkan_float_op(cx, "/", at, &[a, b])?, t));
                }
                let r = self.binary(cx, *op, at, a, b)?;
                if at.is_float() && matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div)
                {
                    exact(cx, r);
                }
                r
            }
            ExprNode::Select { cond, a, b } => {
                let (c, _) = self.expr(cx, cond)?;
                let (a, _) = self.expr(cx, a)?;
                let (b, _) = self.expr(cx, b)?;
                let ty = cx.ty(t);
                cx.b.select(ty, None, c, a, b).map_err(er)?
            }
            ExprNode::Cast { to, a } => {
                let (a, from) = self.expr(cx, a)?;
                self.cast(cx, from, *to, a)?
            }
            ExprNode::Load { buf, index } => {
                let (mem, elem) = match self.lookup(buf)? {
                    Val::Ptr(m, e) => (m, e),
                    _ => return Err(format!("`{}` is not a pointer", buf.name())),
                };
                let (p, _) = self.elem_ptr(cx, mem, elem, index)?;
                let et = cx.mem_ty(elem);
                let v = cx.b.load(et, None, p, None, []).map_err(er)?;
                self.load_conv(cx, elem, v)
            }
            ExprNode::Builtin { kind, dim } => self.builtin(cx, *kind, *dim as u32)?,
            ExprNode::Extract { a, lane } => self.extract(cx, a, *lane)?,
            ExprNode::VecLoad { .. } | ExprNode::Insert { .. } | ExprNode::Vector { .. } => {
                return Err(super::VECTORS.into())
            }
            ExprNode::Intrinsic { op, args } => {
                let mut ids = Vec::new();
                for a in args {
                    ids.push(self.expr(cx, a)?.0);
                }
                self.intrinsic(cx, *op, t, &ids)?
            }
        };
        Ok((v, t))
    }

    fn builtin(&mut self, cx: &mut Ctx, kind: Builtin, d: u32) -> R<Word> {
        let u = cx.ty(Scalar::U32);
        let load = |me: &mut Self, cx: &mut Ctx, k: Builtin| -> R<Word> {
            let var = *me.builtins.get(&k).ok_or("built-in not declared")?;
            let et = match cx.flavour {
                Flavour::Vulkan => u,
                Flavour::OpenCl => cx.ty(Scalar::U64),
            };
            let vt = cx.b.type_vector(et, 3);
            let v = cx.b.load(vt, None, var, None, []).map_err(er)?;
            let c = cx.b.composite_extract(et, None, v, [d]).map_err(er)?;
            match cx.flavour {
                Flavour::Vulkan => Ok(c),
                Flavour::OpenCl => cx.b.u_convert(u, None, c).map_err(er),
            }
        };
        if cx.flavour == Flavour::OpenCl {
            return load(self, cx, kind);
        }
        let push_offset = |me: &mut Self, cx: &mut Ctx| -> R<Word> {
            let pv = me.push_var.ok_or("no push constants")?;
            let pt = cx.ptr(StorageClass::PushConstant, u);
            let m = cx.u32c(d);
            let p = cx.b.access_chain(pt, None, pv, [m]).map_err(er)?;
            cx.b.load(u, None, p, None, []).map_err(er)
        };
        // The whole launch's group counts, from the push constants (see `VulkanLayout`).
        let push_num_groups = |me: &mut Self, cx: &mut Ctx| -> R<Word> {
            let pv = me.push_var.ok_or("no push constants")?;
            let pt = cx.ptr(StorageClass::PushConstant, u);
            let m = cx.u32c(4 + d);
            let p = cx.b.access_chain(pt, None, pv, [m]).map_err(er)?;
            cx.b.load(u, None, p, None, []).map_err(er)
        };
        match kind {
            Builtin::GlobalId => {
                let g = load(self, cx, Builtin::GlobalId)?;
                let o = push_offset(self, cx)?;
                cx.b.i_add(u, None, g, o).map_err(er)
            }
            Builtin::GlobalOffset => push_offset(self, cx),
            Builtin::LocalSize => Ok(self.wg_size[d as usize]),
            Builtin::NumGroups => push_num_groups(self, cx),
            Builtin::GlobalSize => {
                let n = push_num_groups(self, cx)?;
                cx.b.i_mul(u, None, n, self.wg_size[d as usize]).map_err(er)
            }
            k => load(self, cx, k),
        }
    }

    fn binary(&mut self, cx: &mut Ctx, op: BinOp, t: Scalar, a: Word, b: Word) -> R<Word> {
        let ty = cx.ty(t);
        let bt = cx.ty(Scalar::Bool);
        let f = t.is_float();
        let s = t.is_signed();
        let bl = t == Scalar::Bool;
        let bb = &mut cx.b;
        let r = match op {
            BinOp::Add if f => bb.f_add(ty, None, a, b),
            BinOp::Add => bb.i_add(ty, None, a, b),
            BinOp::Sub if f => bb.f_sub(ty, None, a, b),
            BinOp::Sub => bb.i_sub(ty, None, a, b),
            BinOp::Mul if f => bb.f_mul(ty, None, a, b),
            BinOp::Mul => bb.i_mul(ty, None, a, b),
            BinOp::Div if f => bb.f_div(ty, None, a, b),
            BinOp::Div | BinOp::Rem if s && cx.flavour == Flavour::Vulkan => {
                return super::exact::signed_div_rem(cx, op, t, a, b);
            }
            BinOp::Div | BinOp::Rem if s => {
                // MIN / -1 wraps to MIN (= -MIN) and MIN % -1 is 0: divide by 1 instead.
                let m1 = cx.int_const(t, -1);
                let one = cx.int_const(t, 1);
                let is_m1 = cx.b.i_equal(bt, None, b, m1).map_err(er)?;
                let safe = cx.b.select(ty, None, is_m1, one, b).map_err(er)?;
                if op == BinOp::Rem {
                    cx.b.s_rem(ty, None, a, safe)
                } else {
                    let q = cx.b.s_div(ty, None, a, safe).map_err(er)?;
                    let neg = cx.b.s_negate(ty, None, a).map_err(er)?;
                    cx.b.select(ty, None, is_m1, neg, q)
                }
            }
            BinOp::Div => bb.u_div(ty, None, a, b),
            BinOp::Rem => bb.u_mod(ty, None, a, b),
            BinOp::And if bl => bb.logical_and(ty, None, a, b),
            BinOp::Or if bl => bb.logical_or(ty, None, a, b),
            BinOp::Xor if bl => bb.logical_not_equal(ty, None, a, b),
            BinOp::And => bb.bitwise_and(ty, None, a, b),
            BinOp::Or => bb.bitwise_or(ty, None, a, b),
            BinOp::Xor => bb.bitwise_xor(ty, None, a, b),
            BinOp::Shl | BinOp::Shr => {
                let mask = cx.constant(t, (t.bits() - 1) as u64);
                let amt = cx.b.bitwise_and(ty, None, b, mask).map_err(er)?;
                match op {
                    BinOp::Shl => cx.b.shift_left_logical(ty, None, a, amt),
                    _ if s => cx.b.shift_right_arithmetic(ty, None, a, amt),
                    _ => cx.b.shift_right_logical(ty, None, a, amt),
                }
            }
            BinOp::LogicAnd => bb.logical_and(bt, None, a, b),
            BinOp::LogicOr => bb.logical_or(bt, None, a, b),
            BinOp::Eq if bl => bb.logical_equal(bt, None, a, b),
            BinOp::Ne if bl => bb.logical_not_equal(bt, None, a, b),
            _ if bl => return Err(format!("`{}` on bool", op.symbol())),
            BinOp::Eq if f => bb.f_ord_equal(bt, None, a, b),
            BinOp::Ne if f => bb.f_unord_not_equal(bt, None, a, b),
            BinOp::Lt if f => bb.f_ord_less_than(bt, None, a, b),
            BinOp::Le if f => bb.f_ord_less_than_equal(bt, None, a, b),
            BinOp::Gt if f => bb.f_ord_greater_than(bt, None, a, b),
            BinOp::Ge if f => bb.f_ord_greater_than_equal(bt, None, a, b),
            BinOp::Eq => bb.i_equal(bt, None, a, b),
            BinOp::Ne => bb.i_not_equal(bt, None, a, b),
            BinOp::Lt if s => bb.s_less_than(bt, None, a, b),
            BinOp::Le if s => bb.s_less_than_equal(bt, None, a, b),
            BinOp::Gt if s => bb.s_greater_than(bt, None, a, b),
            BinOp::Ge if s => bb.s_greater_than_equal(bt, None, a, b),
            BinOp::Lt => bb.u_less_than(bt, None, a, b),
            BinOp::Le => bb.u_less_than_equal(bt, None, a, b),
            BinOp::Gt => bb.u_greater_than(bt, None, a, b),
            BinOp::Ge => bb.u_greater_than_equal(bt, None, a, b),
        };
        r.map_err(er)
    }

    fn cast(&mut self, cx: &mut Ctx, from: Scalar, to: Scalar, a: Word) -> R<Word> {
        if from == to {
            return Ok(a);
        }
        let tt = cx.ty(to);
        let bt = cx.ty(Scalar::Bool);
        if to == Scalar::Bool {
            let zero = cx.constant(from, 0);
            return if from.is_float() {
                cx.b.f_unord_not_equal(bt, None, a, zero)
            } else {
                cx.b.i_not_equal(bt, None, a, zero)
            }
            .map_err(er);
        }
        if from == Scalar::Bool {
            let (one, zero) = if to.is_float() {
                (cx.float_const(to, 1.0), cx.float_const(to, 0.0))
            } else {
                (cx.constant(to, 1), cx.constant(to, 0))
            };
            return cx.b.select(tt, None, a, one, zero).map_err(er);
        }
        if from.is_int() && to.is_int() {
            return if to.bits() == from.bits() {
                Ok(a)
            } else if to.bits() > from.bits() && from.is_signed() {
                cx.b.s_convert(tt, None, a).map_err(er)
            } else {
                cx.b.u_convert(tt, None, a).map_err(er)
            };
        }
        if from.is_int() {
            return if from.is_signed() {
                cx.b.convert_s_to_f(tt, None, a)
            } else {
                cx.b.convert_u_to_f(tt, None, a)
            }
            .map_err(er);
        }
        if to.is_float() {
            return cx.b.f_convert(tt, None, a).map_err(er);
        }
        // Float to integer: truncate, saturate, NaN -> 0. f16 widens to f32 first (exact).
        let (x, ft) = if from == Scalar::F16 {
            let f32t = cx.ty(Scalar::F32);
            (cx.b.f_convert(f32t, None, a).map_err(er)?, Scalar::F32)
        } else {
            (a, from)
        };
        let fty = cx.ty(ft);
        let min = to.int_min().expect("int") as f64;
        let lim = (to.int_max().expect("int") as f64) + 1.0; // a power of two, exact
        let minc = cx.float_const(ft, min);
        let limc = cx.float_const(ft, lim);
        let zerof = cx.float_const(ft, 0.0);
        let is_nan = cx.b.is_nan(bt, None, x).map_err(er)?;
        let too_big = cx.b.f_ord_greater_than_equal(bt, None, x, limc).map_err(er)?;
        let too_small = cx.b.f_ord_less_than_equal(bt, None, x, minc).map_err(er)?;
        let bad = cx.b.logical_or(bt, None, is_nan, too_big).map_err(er)?;
        let bad = cx.b.logical_or(bt, None, bad, too_small).map_err(er)?;
        let safe = cx.b.select(fty, None, bad, zerof, x).map_err(er)?;
        let wide = if to.bits() < 32 { int_of_bits(32) } else { to };
        let wt = cx.ty(wide);
        let conv = if to.is_signed() {
            cx.b.convert_f_to_s(wt, None, safe)
        } else {
            cx.b.convert_f_to_u(wt, None, safe)
        }
        .map_err(er)?;
        let conv = if wide != to { cx.b.u_convert(tt, None, conv).map_err(er)? } else { conv };
        let maxv = cx.int_const(to, to.int_max().expect("int"));
        let minv = cx.int_const(to, to.int_min().expect("int"));
        let zero = cx.constant(to, 0);
        let r = cx.b.select(tt, None, too_small, minv, conv).map_err(er)?;
        let r = cx.b.select(tt, None, too_big, maxv, r).map_err(er)?;
        cx.b.select(tt, None, is_nan, zero, r).map_err(er)
    }

    fn intrinsic(&mut self, cx: &mut Ctx, op: Intrinsic, t: Scalar, a: &[Word]) -> R<Word> {
        let ty = cx.ty(t);
        let bt = cx.ty(Scalar::Bool);
        match op {
            Intrinsic::Min | Intrinsic::Max if !t.is_float() => {
                let lt = if t.is_signed() {
                    cx.b.s_less_than(bt, None, a[0], a[1])
                } else {
                    cx.b.u_less_than(bt, None, a[0], a[1])
                }
                .map_err(er)?;
                let (x, y) = if op == Intrinsic::Min { (a[0], a[1]) } else { (a[1], a[0]) };
                cx.b.select(ty, None, lt, x, y).map_err(er)
            }
            Intrinsic::Min | Intrinsic::Max => {
                // minimumNumber / maximumNumber with -0.0 < +0.0, spelled out.
                let (x, y) = (a[0], a[1]);
                let it = cx.ty(int_of_bits(t.bits()));
                let xi = cx.b.bitcast(it, None, x).map_err(er)?;
                let zero = cx.constant(int_of_bits(t.bits()), 0);
                let x_neg = cx.b.s_less_than(bt, None, xi, zero).map_err(er)?;
                let lt = cx.b.f_ord_less_than(bt, None, x, y).map_err(er)?;
                let gt = cx.b.f_ord_greater_than(bt, None, x, y).map_err(er)?;
                // Equal (including ±0): min takes x if x is negative, max if it is not.
                let (first, tie_x) = if op == Intrinsic::Min {
                    (lt, x_neg)
                } else {
                    (gt, cx.b.logical_not(bt, None, x_neg).map_err(er)?)
                };
                let other = if op == Intrinsic::Min { gt } else { lt };
                let r = cx.b.select(ty, None, tie_x, x, y).map_err(er)?;
                let r = cx.b.select(ty, None, other, y, r).map_err(er)?;
                let r = cx.b.select(ty, None, first, x, r).map_err(er)?;
                let xn = cx.b.is_nan(bt, None, x).map_err(er)?;
                let yn = cx.b.is_nan(bt, None, y).map_err(er)?;
                let r = cx.b.select(ty, None, yn, x, r).map_err(er)?;
                cx.b.select(ty, None, xn, y, r).map_err(er)
            }
            Intrinsic::Mad | Intrinsic::Add3 if t.is_int() => {
                // SPIR-V integer arithmetic wraps at the type's width, as the IR does.
                let m = if op == Intrinsic::Mad {
                    cx.b.i_mul(ty, None, a[0], a[1])
                } else {
                    cx.b.i_add(ty, None, a[0], a[1])
                }
                .map_err(er)?;
                cx.b.i_add(ty, None, m, a[2]).map_err(er)
            }
            Intrinsic::Mad | Intrinsic::Add3 => Err(format!("`{}` on {t}", op.name())),
            Intrinsic::Abs if !t.is_float() => {
                let zero = cx.constant(t, 0);
                let neg = cx.b.s_less_than(bt, None, a[0], zero).map_err(er)?;
                let n = cx.b.s_negate(ty, None, a[0]).map_err(er)?;
                if t.is_signed() {
                    cx.b.select(ty, None, neg, n, a[0]).map_err(er)
                } else {
                    Ok(a[0])
                }
            }
            Intrinsic::Abs => {
                let is = int_of_bits(t.bits());
                let it = cx.ty(is);
                let xi = cx.b.bitcast(it, None, a[0]).map_err(er)?;
                let mask = cx.constant(is, u64::MAX >> (64 - t.bits() + 1));
                let r = cx.b.bitwise_and(it, None, xi, mask).map_err(er)?;
                cx.b.bitcast(ty, None, r).map_err(er)
            }
            Intrinsic::Fma | Intrinsic::Sqrt
                if cx.flavour == Flavour::Vulkan
                    && (t == Scalar::F32 || (op == Intrinsic::Fma && !cx.exact_f64_fma)) =>
            {
                self.vulkan_float_op(cx, op.name(), t, a)
            }
            _ => {
                let inst = match cx.flavour {
                    Flavour::Vulkan => {
                        if t == Scalar::F64 && op.is_approximate() {
                            return Err(format!(
                                "`{}` on f64 cannot be expressed in the Vulkan flavour \
                                 (GLSL.std.450 defines it on 16/32-bit floats only)",
                                op.name()
                            ));
                        }
                        (match op {
                            Intrinsic::Fma => GLOp::Fma,
                            Intrinsic::Sqrt => GLOp::Sqrt,
                            Intrinsic::Floor => GLOp::Floor,
                            Intrinsic::Ceil => GLOp::Ceil,
                            Intrinsic::Trunc => GLOp::Trunc,
                            Intrinsic::Exp => GLOp::Exp,
                            Intrinsic::Log => GLOp::Log,
                            Intrinsic::Sin => GLOp::Sin,
                            _ => GLOp::Cos,
                        }) as u32
                    }
                    Flavour::OpenCl => {
                        (match op {
                            Intrinsic::Fma => CLOp::fma,
                            Intrinsic::Sqrt => CLOp::sqrt,
                            Intrinsic::Floor => CLOp::floor,
                            Intrinsic::Ceil => CLOp::ceil,
                            Intrinsic::Trunc => CLOp::trunc,
                            Intrinsic::Exp => CLOp::exp,
                            Intrinsic::Log => CLOp::log,
                            Intrinsic::Sin => CLOp::sin,
                            _ => CLOp::cos,
                        }) as u32
                    }
                };
                let ops: Vec<Operand> = a.iter().map(|&x| Operand::IdRef(x)).collect();
                let set = cx.ext_set;
                cx.b.ext_inst(ty, None, set, inst, ops).map_err(er)
            }
        }
    }
}

impl Emitter {
    /// f32 `/`, `fma` or `sqrt`, or f64 `fma`, in the Vulkan flavour, where the driver's
    /// instructions may be inexact: correctly rounded sequences on f32 (see `exact`); f64
    /// `fma` on a driver not measured to round it once is an error (GLSL.std.450 `Fma` may
    /// round twice, lavapipe's does, and an exact f64 emulation is not written).
    fn vulkan_float_op(&mut self, cx: &mut Ctx, name: &str, t: Scalar, a: &[Word]) -> R<Word> {
        match (t, name, a) {
            (Scalar::F32, "/", &[x, y]) => super::exact::div_f32(cx, x, y),
            (Scalar::F32, "fma", &[x, y, z]) => super::exact::fma_f32(cx, x, y, z),
            (Scalar::F32, "sqrt", &[x]) => super::exact::sqrt_f32(cx, x),
            (Scalar::F64, "fma", _) => Err("`fma` on f64 cannot be expressed in the Vulkan \
                 flavour for this driver: its GLSL.std.450 `Fma` on f64 was not measured to \
                 round once (lavapipe's rounds twice) and kiln's `fma` rounds once; use \
                 another device"
                .into()),
            _ => Err(format!("`{name}` on {t}")),
        }
    }
}
