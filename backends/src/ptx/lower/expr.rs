//! Lowering of expressions: operators, casts, intrinsics and loads.

use kiln_ir::{BinOp, Expr, ExprNode, Imm, Intrinsic, Scalar, UnOp};

use super::super::regs::{arith_ty, bits_ty, imm, imm_val, mem_ty, Class, Reg, Text, Val};
use super::{scalar, sel_ty, Binding, Lower, R};

impl Lower<'_> {
    // ---- expressions -------------------------------------------------------------------

    /// Evaluates `e`; the final instruction writes `want` when given and of the right class.
    pub(super) fn expr(&mut self, e: &Expr, want: Option<Reg>) -> R<Val> {
        let t = scalar(e.ty())?;
        match e.node() {
            ExprNode::Var(v) => match self.lookup(v.name())? {
                Binding::Val(v) => Ok(v.clone()),
                Binding::Var(r) => Ok(Val::Reg(*r)),
                Binding::Mem(_) => Err(format!("pointer `{}` used as a value", v.name())),
                Binding::Vector(_) => Err(format!("vector `{}` used as a scalar", v.name())),
                Binding::Frag(_) => Err(format!("fragment `{}` used as a scalar", v.name())),
            },
            ExprNode::Imm(i) => Ok(imm(i)),
            ExprNode::Builtin { kind, dim } => self
                .builtins
                .get(&(*kind, *dim))
                .map(|r| Val::Reg(*r))
                .ok_or_else(|| format!("built-in {}({dim}) not prepared", kind.name())),
            ExprNode::Load { buf, index } => {
                let m = self.mem(buf.name())?;
                if m.elem == Scalar::Bool {
                    return Err("bool elements in memory".into());
                }
                let addr = self.addr(&m, index)?;
                let d = self.dst(want, Class::of(m.elem));
                self.ins(format_args!("ld{}.{} {d}, {addr}", m.space, mem_ty(m.elem)));
                Ok(Val::Reg(d))
            }
            ExprNode::Unary { op, a } => self.unary(*op, t, a, want),
            ExprNode::Binary { op, a, b } => self.binary(*op, a, b, want),
            ExprNode::Select { cond, a, b } => {
                let c = self.expr(cond, None)?;
                let c = self.reg(c, Class::Pred);
                let x = self.expr(a, None)?;
                let y = self.expr(b, None)?;
                if t == Scalar::Bool {
                    let (x, y) = (self.reg(x, Class::Pred), self.reg(y, Class::Pred));
                    let (t1, t2) = (self.fresh(Class::Pred), self.fresh(Class::Pred));
                    self.ins(format_args!("and.pred {t1}, {c}, {x}"));
                    self.ins(format_args!("and.pred {t2}, !{c}, {y}"));
                    let d = self.dst(want, Class::Pred);
                    self.ins(format_args!("or.pred {d}, {t1}, {t2}"));
                    return Ok(Val::Reg(d));
                }
                let d = self.dst(want, Class::of(t));
                self.ins(format_args!("selp.{} {d}, {x}, {y}, {c}", sel_ty(t)));
                Ok(Val::Reg(d))
            }
            ExprNode::Cast { to, a } => self.cast(*to, a, want),
            ExprNode::Intrinsic { op, args } => self.intrinsic(*op, t, args, want),
            ExprNode::Extract { a, lane } => {
                // A lane of a vector `let` (unrolled code reads each many times): that one
                // value, without copying the others.
                if let Some(v) = a.as_var() {
                    if let Binding::Vector(lanes) = self.lookup(v.name())? {
                        if let Some(x) = lanes.get(*lane as usize) {
                            return Ok(x.clone());
                        }
                    }
                }
                let lanes = self.vexpr(a)?;
                lanes.get(*lane as usize).cloned().ok_or_else(|| format!("lane {lane} of {a}"))
            }
            ExprNode::VecLoad { .. } | ExprNode::Insert { .. } | ExprNode::Vector { .. } => {
                Err(format!("vector {e} used as a scalar"))
            }
        }
    }

    /// Wraps a 32-bit register to an 8/16-bit type's canonical (extended) form, in place.
    fn canon(&mut self, t: Scalar, r: Reg) {
        match t {
            Scalar::I8 | Scalar::I16 => self.ins(format_args!("cvt.s32.{} {r}, {r}", mem_ty(t))),
            Scalar::U8 => self.ins(format_args!("and.b32 {r}, {r}, 255")),
            Scalar::U16 => self.ins(format_args!("and.b32 {r}, {r}, 65535")),
            _ => {}
        }
    }

    fn unary(&mut self, op: UnOp, t: Scalar, a: &Expr, want: Option<Reg>) -> R<Val> {
        let x = self.expr(a, None)?;
        let c = Class::of(t);
        let x = self.reg(x, c);
        let d = self.dst(want, c);
        match (op, c) {
            (UnOp::Not, Class::Pred) => self.ins(format_args!("not.pred {d}, {x}")),
            // A sign-bit flip: `neg.f32` may give "an unspecified NaN" for a NaN, and kiln's
            // `-` keeps the payload (a signalling NaN stays signalling).
            (UnOp::Neg, Class::F32) => self.ins(format_args!("xor.b32 {d}, {x}, 0x80000000")),
            (UnOp::Neg, Class::F64) => {
                self.ins(format_args!("xor.b64 {d}, {x}, 0x8000000000000000"))
            }
            (UnOp::Neg, Class::B32 | Class::B64) if t.is_int() => {
                let s = if c == Class::B64 { "s64" } else { "s32" };
                self.ins(format_args!("neg.{s} {d}, {x}"));
                self.canon(t, d);
            }
            (UnOp::BitNot, Class::B32 | Class::B64) if t.is_int() => {
                self.ins(format_args!("not.{} {d}, {x}", bits_ty(t)));
                self.canon(t, d);
            }
            _ => return Err(format!("`{}` on {t}", op.symbol())),
        }
        Ok(Val::Reg(d))
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, want: Option<Reg>) -> R<Val> {
        let t = scalar(a.ty())?;
        let x = self.expr(a, None)?;
        let y = self.expr(b, None)?;
        let c = Class::of(t);
        if op.is_comparison() && c != Class::Pred {
            let cmp = match (op, t.is_float()) {
                (BinOp::Eq, _) => "eq",
                (BinOp::Ne, false) => "ne",
                (BinOp::Ne, true) => "neu",
                (BinOp::Lt, _) => "lt",
                (BinOp::Le, _) => "le",
                (BinOp::Gt, _) => "gt",
                _ => "ge",
            };
            if t == Scalar::F16 {
                return Err("comparison of f16 values".into());
            }
            let d = self.dst(want, Class::Pred);
            self.ins(format_args!("setp.{cmp}.{} {d}, {x}, {y}", arith_ty(t)));
            return Ok(Val::Reg(d));
        }
        match c {
            Class::Pred => {
                let (x, y) = (self.reg(x, c), self.reg(y, c));
                let d = self.dst(want, c);
                match op {
                    BinOp::And | BinOp::LogicAnd => {
                        self.ins(format_args!("and.pred {d}, {x}, {y}"))
                    }
                    BinOp::Or | BinOp::LogicOr => self.ins(format_args!("or.pred {d}, {x}, {y}")),
                    BinOp::Xor | BinOp::Ne => self.ins(format_args!("xor.pred {d}, {x}, {y}")),
                    BinOp::Eq => {
                        let n = self.fresh(c);
                        self.ins(format_args!("xor.pred {n}, {x}, {y}"));
                        self.ins(format_args!("not.pred {d}, {n}"));
                    }
                    _ => return Err(format!("`{}` on bool", op.symbol())),
                }
                Ok(Val::Reg(d))
            }
            Class::F32 | Class::F64 => {
                let ft = arith_ty(t);
                let o = match (op, self.fast) {
                    (BinOp::Add, false) => "add.rn",
                    (BinOp::Sub, false) => "sub.rn",
                    (BinOp::Mul, false) => "mul.rn",
                    (BinOp::Add, true) => "add",
                    (BinOp::Sub, true) => "sub",
                    (BinOp::Mul, true) => "mul",
                    (BinOp::Div, _) => "div.rn",
                    _ => return Err(format!("`{}` on {t}", op.symbol())),
                };
                let d = self.dst(want, c);
                self.ins_ops(o, ft, d, &[&x, &y]);
                Ok(Val::Reg(d))
            }
            Class::B32 | Class::B64 => {
                let wide = c == Class::B64;
                let (s, u, bt) = if wide { ("s64", "u64", "b64") } else { ("s32", "u32", "b32") };
                let at = arith_ty(t);
                let bits = t.bits() as i128;
                let shift_amount = |l: &mut Self, y: Val| -> Val {
                    if let Val::Imm(_) = y {
                        if let Some(n) = b.as_imm().and_then(Imm::as_i128) {
                            if (0..bits).contains(&n) {
                                return imm_val(n);
                            }
                        }
                    }
                    let m = l.fresh(Class::B32);
                    if wide {
                        let y = l.reg(y, Class::B64);
                        l.ins(format_args!("cvt.u32.u64 {m}, {y}"));
                        l.ins(format_args!("and.b32 {m}, {m}, {}", bits - 1));
                    } else {
                        l.ins(format_args!("and.b32 {m}, {y}, {}", bits - 1));
                    }
                    Val::Reg(m)
                };
                let (text, ty, wraps) = match op {
                    BinOp::Add => ("add", s, true),
                    BinOp::Sub => ("sub", s, true),
                    BinOp::Mul => ("mul.lo", s, true),
                    BinOp::Div => ("div", at, t.is_signed()),
                    BinOp::Rem => ("rem", at, false),
                    BinOp::And => ("and", bt, false),
                    BinOp::Or => ("or", bt, false),
                    BinOp::Xor => ("xor", bt, false),
                    BinOp::Shl | BinOp::Shr => {
                        let m = shift_amount(self, y);
                        let x = Val::Reg(self.reg(x, c));
                        let d = self.dst(want, c);
                        if op == BinOp::Shl {
                            self.ins(format_args!("shl.{bt} {d}, {x}, {m}"));
                            self.canon(t, d);
                        } else {
                            self.ins(format_args!("shr.{at} {d}, {x}, {m}"));
                        }
                        return Ok(Val::Reg(d));
                    }
                    _ => return Err(format!("`{}` on {t}", op.symbol())),
                };
                let _ = u;
                let d = self.dst(want, c);
                self.ins_ops(text, ty, d, &[&x, &y]);
                if wraps {
                    self.canon(t, d);
                }
                Ok(Val::Reg(d))
            }
            Class::B16 => Err(format!("`{}` on f16 (storage only)", op.symbol())),
        }
    }

    fn cast(&mut self, to: Scalar, a: &Expr, want: Option<Reg>) -> R<Val> {
        let from = scalar(a.ty())?;
        let x = self.expr(a, None)?;
        if from == to {
            return Ok(x);
        }
        if from == Scalar::BF16 || to == Scalar::BF16 {
            return self.bf16_cast(from, to, x, want);
        }
        let (fc, tc) = (Class::of(from), Class::of(to));
        let x = self.reg(x, fc);
        if to == Scalar::Bool {
            let d = self.dst(want, Class::Pred);
            match fc {
                Class::B32 | Class::B64 => {
                    self.ins(format_args!("setp.ne.{} {d}, {x}, 0", bits_ty(from)))
                }
                Class::F32 => self.ins(format_args!("setp.neu.f32 {d}, {x}, 0f00000000")),
                Class::F64 => self.ins(format_args!("setp.neu.f64 {d}, {x}, 0d0000000000000000")),
                Class::B16 => {
                    let f = self.fresh(Class::F32);
                    self.ins(format_args!("cvt.f32.f16 {f}, {x}"));
                    self.ins(format_args!("setp.neu.f32 {d}, {f}, 0f00000000"));
                }
                Class::Pred => unreachable!("bool to bool is the identity"),
            }
            return Ok(Val::Reg(d));
        }
        let d = self.dst(want, tc);
        if from == Scalar::Bool {
            let (one, zero) = match to {
                Scalar::F16 => ("0x3C00", "0x0000"),
                Scalar::F32 => ("0f3F800000", "0f00000000"),
                Scalar::F64 => ("0d3FF0000000000000", "0d0000000000000000"),
                _ => ("1", "0"),
            };
            self.ins(format_args!("selp.{} {d}, {one}, {zero}, {x}", sel_ty(to)));
            return Ok(Val::Reg(d));
        }
        match (from.is_int(), to.is_int()) {
            (true, true) => match (fc, tc) {
                (Class::B64, Class::B64) => return Ok(Val::Reg(x)),
                (Class::B32, Class::B64) => {
                    // Extension follows the source's signedness; the bits are the same for
                    // either 64-bit target type.
                    let ext = if from.is_signed() { "s64.s32" } else { "u64.u32" };
                    self.ins(format_args!("cvt.{ext} {d}, {x}"));
                }
                (Class::B64, _) => {
                    self.ins(format_args!("cvt.u32.u64 {d}, {x}"));
                    self.canon(to, d);
                }
                _ => {
                    let keeps = to.bits() == 32
                        || (from.bits() < to.bits() && (from.is_unsigned() || to.is_signed()))
                        || (from.bits() == to.bits() && from.is_signed() == to.is_signed());
                    if keeps {
                        return Ok(Val::Reg(x));
                    }
                    match to {
                        Scalar::I8 | Scalar::I16 => {
                            self.ins(format_args!("cvt.s32.{} {d}, {x}", mem_ty(to)))
                        }
                        Scalar::U8 => self.ins(format_args!("and.b32 {d}, {x}, 255")),
                        _ => self.ins(format_args!("and.b32 {d}, {x}, 65535")),
                    }
                }
            },
            (true, false) => {
                let ft = if to == Scalar::F16 { "f16" } else { arith_ty(to) };
                self.ins(format_args!("cvt.rn.{ft}.{} {d}, {x}", arith_ty(from)));
            }
            (false, true) => {
                let src = if from == Scalar::F16 { "f16" } else { arith_ty(from) };
                let wide = tc == Class::B64;
                let it = match (wide, to.is_signed()) {
                    (true, true) => "s64",
                    (true, false) => "u64",
                    (false, true) => "s32",
                    (false, false) => "u32",
                };
                self.ins(format_args!("cvt.rzi.{it}.{src} {d}, {x}"));
                if to.bits() < 32 {
                    let (lo, hi) = (to.int_min().unwrap_or(0), to.int_max().unwrap_or(0));
                    if to.is_signed() {
                        self.ins(format_args!("max.s32 {d}, {d}, {lo}"));
                        self.ins(format_args!("min.s32 {d}, {d}, {hi}"));
                    } else {
                        self.ins(format_args!("min.u32 {d}, {d}, {hi}"));
                    }
                }
                // NaN gives 0 in kiln; cvt.rzi from f64 gives the most negative integer.
                let p = self.fresh(Class::Pred);
                self.ins(format_args!("setp.nan.{src} {p}, {x}, {x}"));
                self.ins(format_args!(
                    "selp.{} {d}, 0, {d}, {p}",
                    if wide { "b64" } else { "b32" }
                ));
            }
            (false, false) => {
                let ft = |s: Scalar| if s == Scalar::F16 { "f16" } else { arith_ty(s) };
                let rn = if to.bits() < from.bits() { ".rn" } else { "" };
                self.ins(format_args!("cvt{rn}.{}.{} {d}, {x}", ft(to), ft(from)));
            }
        }
        Ok(Val::Reg(d))
    }

    /// Casts to and from bf16: f32 to bf16 rounds once (`cvt.rn.bf16.f32`, sm_80); bf16 to
    /// f32 is exact (the bits moved up). Other casts would round twice on the way through f32
    /// or need sm_90's conversions: refused by name.
    fn bf16_cast(&mut self, from: Scalar, to: Scalar, x: Val, want: Option<Reg>) -> R<Val> {
        let x = self.reg(x, Class::of(from));
        match (from, to) {
            (Scalar::F32, Scalar::BF16) => {
                let d = self.dst(want, Class::B16);
                self.ins(format_args!("cvt.rn.bf16.f32 {d}, {x}"));
                Ok(Val::Reg(d))
            }
            (Scalar::BF16, Scalar::F32) => {
                let w = self.fresh(Class::B32);
                self.ins(format_args!("cvt.u32.u16 {w}, {x}"));
                self.ins(format_args!("shl.b32 {w}, {w}, 16"));
                let d = self.dst(want, Class::F32);
                self.ins(format_args!("mov.b32 {d}, {w}"));
                Ok(Val::Reg(d))
            }
            _ => Err(format!(
                "cast from {from} to {to} is not lowered for PTX (only f32 to and from bf16; \
                 cast through f32 where that is exact)"
            )),
        }
    }

    fn intrinsic(&mut self, op: Intrinsic, t: Scalar, args: &[Expr], want: Option<Reg>) -> R<Val> {
        if args.len() != op.arity() {
            return Err(format!("`{}` takes {} arguments", op.name(), op.arity()));
        }
        // At most three operands, kept inline (a `Vec` was an allocation per intrinsic); the
        // slots past the arity hold a constant made without formatting (three `0`s written
        // through `fmt` per intrinsic were a tenth of an unrolled GEMM's PTX lowering).
        let mut vals = [Val::Imm(Text::ZERO), Val::Imm(Text::ZERO), Val::Imm(Text::ZERO)];
        for (slot, a) in vals.iter_mut().zip(args) {
            *slot = self.expr(a, None)?;
        }
        let c = Class::of(t);
        let ty = arith_ty(t);
        let float = matches!(c, Class::F32 | Class::F64);
        if (!float && (op.float_only() || !t.is_int())) || (float && op.int_only()) {
            return Err(format!("`{}` on {t}", op.name()));
        }
        match op {
            Intrinsic::Mad | Intrinsic::Add3 => {
                // Integers narrower than 32 bits live in 32-bit registers: compute at 32 (or
                // 64) bits, where both wrap the same way, and re-canonicalize to the width.
                let wide = c == Class::B64;
                let s = if wide { "s64" } else { "s32" };
                let a = self.reg(vals[0].clone(), c);
                let d = self.dst(want, c);
                if op == Intrinsic::Mad {
                    self.ins(format_args!("mad.lo.{s} {d}, {a}, {}, {}", vals[1], vals[2]));
                } else {
                    // PTX has no three-input add: two adds.
                    let m = self.fresh(c);
                    self.ins(format_args!("add.{s} {m}, {a}, {}", vals[1]));
                    self.ins(format_args!("add.{s} {d}, {m}, {}", vals[2]));
                }
                self.canon(t, d);
                Ok(Val::Reg(d))
            }
            Intrinsic::Min | Intrinsic::Max => {
                let d = self.dst(want, c);
                self.ins(format_args!("{}.{ty} {d}, {}, {}", op.name(), vals[0], vals[1]));
                Ok(Val::Reg(d))
            }
            Intrinsic::Abs if t.is_unsigned() => Ok(vals[0].clone()),
            // The sign bit cleared, as for `-`: `abs.f32` may change a NaN's payload.
            Intrinsic::Abs if float => {
                let x = self.reg(vals[0].clone(), c);
                let d = self.dst(want, c);
                let (b, mask) = if c == Class::F64 {
                    ("b64", "0x7fffffffffffffff")
                } else {
                    ("b32", "0x7fffffff")
                };
                self.ins(format_args!("and.{b} {d}, {x}, {mask}"));
                Ok(Val::Reg(d))
            }
            Intrinsic::Abs => {
                let x = self.reg(vals[0].clone(), c);
                let d = self.dst(want, c);
                let ty = if float {
                    ty
                } else if c == Class::B64 {
                    "s64"
                } else {
                    "s32"
                };
                self.ins(format_args!("abs.{ty} {d}, {x}"));
                self.canon(t, d);
                Ok(Val::Reg(d))
            }
            Intrinsic::Fma => {
                let d = self.dst(want, c);
                self.ins_ops("fma.rn", ty, d, &[&vals[0], &vals[1], &vals[2]]);
                Ok(Val::Reg(d))
            }
            _ => {
                let x = self.reg(vals[0].clone(), c);
                let simple = match op {
                    Intrinsic::Sqrt => Some("sqrt.rn"),
                    Intrinsic::Floor => Some("cvt.rmi"),
                    Intrinsic::Ceil => Some("cvt.rpi"),
                    Intrinsic::Trunc => Some("cvt.rzi"),
                    _ => None,
                };
                if let Some(s) = simple {
                    let d = self.dst(want, c);
                    let tt = if s.starts_with("cvt") { format!("{ty}.{ty}") } else { ty.into() };
                    self.ins(format_args!("{s}.{tt} {d}, {x}"));
                    return Ok(Val::Reg(d));
                }
                if t != Scalar::F32 {
                    return Err(format!(
                        "`{}` on {t} (PTX has approximations for f32 only)",
                        op.name()
                    ));
                }
                let d = self.dst(want, c);
                match op {
                    Intrinsic::Exp => {
                        let s = self.fresh(c);
                        self.ins(format_args!("mul.rn.f32 {s}, {x}, 0f3FB8AA3B"));
                        self.ins(format_args!("ex2.approx.f32 {d}, {s}"));
                    }
                    Intrinsic::Log => {
                        let s = self.fresh(c);
                        self.ins(format_args!("lg2.approx.f32 {s}, {x}"));
                        self.ins(format_args!("mul.rn.f32 {d}, {s}, 0f3F317218"));
                    }
                    Intrinsic::Sin => self.ins(format_args!("sin.approx.f32 {d}, {x}")),
                    _ => self.ins(format_args!("cos.approx.f32 {d}, {x}")),
                }
                Ok(Val::Reg(d))
            }
        }
    }
}
