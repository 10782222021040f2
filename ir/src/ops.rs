//! Operator overloading and conversions that build expressions: `&a * 2 + b`, `-e`, `!c`.
//!
//! A Rust number combined with an expression takes the expression's type, as an immediate
//! does in oneDNN; a number on the left (`2 * e`) is accepted as i32 or f64 only, so that an
//! unsuffixed literal resolves.

use crate::expr::{BinOp, Expr, UnOp, Var};
use crate::types::{Scalar, Type};

/// Something that can be the second operand of an operator whose first operand is an
/// expression: another expression, or a Rust number that takes the first operand's type.
pub trait IntoOperand {
    /// Converts to an expression; `ty` is the other operand's type.
    fn into_operand(self, ty: Type) -> Expr;
}

impl IntoOperand for Expr {
    fn into_operand(self, _: Type) -> Expr {
        self
    }
}

impl IntoOperand for &Expr {
    fn into_operand(self, _: Type) -> Expr {
        self.clone()
    }
}

impl IntoOperand for &Var {
    fn into_operand(self, _: Type) -> Expr {
        self.expr()
    }
}

macro_rules! number_operand {
    ($($t:ty),*) => {$(
        impl IntoOperand for $t {
            fn into_operand(self, ty: Type) -> Expr {
                Expr::constant(ty.scalar().unwrap_or(Scalar::I32), self as f64)
            }
        }
    )*};
}
number_operand!(i32, i64, u32, u64, f32, f64);

impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Expr {
        e.clone()
    }
}

impl From<&Var> for Expr {
    fn from(v: &Var) -> Expr {
        v.expr()
    }
}

impl From<Var> for Expr {
    fn from(v: Var) -> Expr {
        v.expr()
    }
}

impl From<bool> for Expr {
    fn from(b: bool) -> Expr {
        Expr::bool(b)
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::i32(v)
    }
}

impl From<u32> for Expr {
    fn from(v: u32) -> Expr {
        Expr::u32(v)
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::i64(v)
    }
}

impl From<u64> for Expr {
    fn from(v: u64) -> Expr {
        Expr::u64(v)
    }
}

impl From<f32> for Expr {
    fn from(v: f32) -> Expr {
        Expr::f32(v)
    }
}

impl From<f64> for Expr {
    fn from(v: f64) -> Expr {
        Expr::f64(v)
    }
}

macro_rules! binary_operator {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl<R: IntoOperand> std::ops::$trait<R> for Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                let rhs = rhs.into_operand(self.ty());
                Expr::binary(BinOp::$op, self, rhs)
            }
        }
        impl<R: IntoOperand> std::ops::$trait<R> for &Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                let rhs = rhs.into_operand(self.ty());
                Expr::binary(BinOp::$op, self.clone(), rhs)
            }
        }
        impl<R: IntoOperand> std::ops::$trait<R> for &Var {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                let rhs = rhs.into_operand(self.ty());
                Expr::binary(BinOp::$op, self.expr(), rhs)
            }
        }
        binary_operator!(@numbers $trait $method $op; i32, f64);
    )*};
    (@numbers $trait:ident $method:ident $op:ident; $($t:ty),*) => {$(
        impl std::ops::$trait<Expr> for $t {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                let lhs = self.into_operand(rhs.ty());
                Expr::binary(BinOp::$op, lhs, rhs)
            }
        }
        impl std::ops::$trait<&Expr> for $t {
            type Output = Expr;
            fn $method(self, rhs: &Expr) -> Expr {
                let lhs = self.into_operand(rhs.ty());
                Expr::binary(BinOp::$op, lhs, rhs.clone())
            }
        }
    )*};
}

// A Rust number on the left (`2 * e`) is accepted as i32 or f64 only, so that an unsuffixed
// literal resolves; like a number on the right, it takes the expression's type.
binary_operator!(
    Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem,
    BitAnd bitand And, BitOr bitor Or, BitXor bitxor Xor, Shl shl Shl, Shr shr Shr
);

impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::unary(UnOp::Neg, self)
    }
}

impl std::ops::Neg for &Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::unary(UnOp::Neg, self.clone())
    }
}

impl std::ops::Not for Expr {
    type Output = Expr;
    /// `!` on a `bool` expression is logical not; on an integer it is bitwise complement.
    fn not(self) -> Expr {
        let op = if self.ty().is_bool() { UnOp::Not } else { UnOp::BitNot };
        Expr::unary(op, self)
    }
}

impl std::ops::Not for &Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        !self.clone()
    }
}
