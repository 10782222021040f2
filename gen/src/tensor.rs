//! [`Tensor`]: a block of a larger tensor, given by its dimensions and the offsets (IR
//! expressions) of its first element. oneDNN's example is a `32x32x1x1` tile of
//! activations at `[mb_idx, ic_idx, 0, 0]`.
//!
//! ```
//! use kiln_gen::tensor::Tensor;
//! use kiln_ir::{Type, Var};
//! let mb = Var::new("mb_idx", Type::I32);
//! let ic = Var::new("ic_idx", Type::I32);
//! let t = Tensor::new(vec![32, 32, 1, 1], vec![mb.expr(), ic.expr(), 0.into(), 0.into()]).unwrap();
//! assert_eq!(t.to_string(), "32x32x1x1 at [mb_idx, ic_idx, 0, 0]");
//! // Element (1, 2, 0, 0) of the tile is element (mb_idx + 1, ic_idx + 2, 0, 0) of the whole.
//! let at = t.outer_coords(&[1.into(), 2.into(), 0.into(), 0.into()]);
//! assert_eq!(at[0].to_string(), "mb_idx + 1");
//! ```

use std::fmt;

use kiln_ir::{Expr, Type};

use crate::ix;

/// A `dims`-sized block of an enclosing tensor whose first element is at `offsets`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    dims: Vec<i64>,
    offsets: Vec<Expr>,
}

impl Tensor {
    /// A tensor of the given sizes at the given offsets (`i32` expressions, one per
    /// dimension).
    pub fn new(dims: Vec<i64>, offsets: Vec<Expr>) -> Result<Tensor, String> {
        if dims.len() != offsets.len() {
            return Err(format!("{} dimensions but {} offsets", dims.len(), offsets.len()));
        }
        if let Some(d) = dims.iter().find(|&&d| d <= 0) {
            return Err(format!("dimension size {d}: sizes must be positive"));
        }
        if let Some(o) = offsets.iter().find(|o| o.ty() != Type::I32) {
            return Err(format!("offset `{o}` is {}, not i32", o.ty()));
        }
        Ok(Tensor { dims, offsets })
    }

    /// A whole tensor: offsets all 0.
    pub fn whole(dims: Vec<i64>) -> Tensor {
        let offsets = dims.iter().map(|_| ix::c(0)).collect();
        Tensor { dims, offsets }
    }

    /// The dimension sizes.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The offsets of the first element in the enclosing tensor.
    pub fn offsets(&self) -> &[Expr] {
        &self.offsets
    }

    /// The enclosing tensor's coordinates of this tensor's element `idx`.
    pub fn outer_coords(&self, idx: &[Expr]) -> Vec<Expr> {
        self.offsets.iter().zip(idx).map(|(o, i)| ix::add(o, i)).collect()
    }

    /// The number of elements.
    pub fn elems(&self) -> i64 {
        self.dims.iter().product()
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d: Vec<String> = self.dims.iter().map(|x| x.to_string()).collect();
        let o: Vec<String> = self.offsets.iter().map(|x| x.to_string()).collect();
        write!(f, "{} at [{}]", d.join("x"), o.join(", "))
    }
}
