//! [`Layout`]: how a tensor's elements lie in memory, as oneDNN's blocked memory descriptor.
//!
//! A layout has an element type, logical dimensions, `offset0` (where element `(0, ..., 0)`
//! lies, in elements) and a list of blocks, outermost first. Each block names a dimension,
//! a size and a stride (in elements). A dimension may be split into several blocks: its
//! coordinate `x` is taken apart innermost block first (`x % size`, then `(x / size) % size'`,
//! ...), the outermost block of the dimension taking what is left. The element's offset is
//! `offset0 + sum(block index * block stride)`.
//!
//! The notation is oneDNN's, outermost block first: `4n2c7h7w32n32c` is six blocks (`n`
//! split 4 x 32, `c` split 2 x 32), and `abcd` is a dense row-major 4-D layout. A block is
//! `size? letter ('[' stride ']')?`:
//!
//! * the letter names the dimension: by default `a` is dimension 0, `b` dimension 1, ...;
//!   [`Layout::parse_named`] takes other names (`"nchw"`);
//! * a block without a size (or written in upper case, as in oneDNN's `NChw32n32c`) takes
//!   what the dimension's other blocks leave (rounded up: a padded dimension), so it needs
//!   the dimension sizes;
//! * a block without `[stride]` is dense against the block to its right (stride = that
//!   block's stride times its size; 1 for the innermost block).
//!
//! ```
//! use kiln_gen::layout::Layout;
//! use kiln_ir::Scalar;
//! let l = Layout::parse_named("4n2c7h7w32n32c", "nchw", Scalar::F32, None).unwrap();
//! assert_eq!(l.dims(), &[128, 64, 7, 7]);
//! assert_eq!(l.notation("nchw"), "4n2c7h7w32n32c");
//! // n = 33 is block (1, 1) of n; c = 5 is block (0, 5) of c.
//! assert_eq!(l.offset_of(&[33, 5, 0, 0]), 2 * 7 * 7 * 32 * 32 + 32 + 5);
//! let dense = Layout::parse_named("NCHW", "nchw", Scalar::F32, Some(&[2, 3, 4, 5])).unwrap();
//! assert_eq!(dense.notation("nchw"), "2n3c4h5w");
//! ```

use std::fmt;

use kiln_ir::{Expr, Scalar};

use crate::ix;

/// The default dimension names: `a` is dimension 0, `b` dimension 1, and so on.
pub const DEFAULT_NAMES: &str = "abcdefghijkl";

/// One block of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    /// The dimension this block splits.
    pub dim: usize,
    /// How many indices it spans.
    pub size: i64,
    /// Distance in elements between consecutive indices.
    pub stride: i64,
}

/// A layout that cannot be built or parsed: where (a 1-based column of the notation, if
/// from text) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError {
    /// The notation, if the error is about one.
    pub text: Option<String>,
    /// 1-based column in `text`.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.text {
            Some(t) => write!(f, "layout `{t}`, column {}: {}", self.column, self.message),
            None => write!(f, "layout: {}", self.message),
        }
    }
}

impl std::error::Error for LayoutError {}

fn plain(message: String) -> LayoutError {
    LayoutError { text: None, column: 0, message }
}

/// A memory layout: element type, dimensions, `offset0` and blocks (outermost first).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    ty: Scalar,
    dims: Vec<i64>,
    offset0: i64,
    blocks: Vec<Block>,
}

impl Layout {
    /// A layout from its parts. Every dimension must have a block, sizes must be positive,
    /// strides non-negative, and the blocks of a dimension must span at least its size.
    pub fn new(
        ty: Scalar,
        dims: Vec<i64>,
        offset0: i64,
        blocks: Vec<Block>,
    ) -> Result<Layout, LayoutError> {
        if ty == Scalar::Bool {
            return Err(plain("bool elements cannot be stored".into()));
        }
        if offset0 < 0 {
            return Err(plain(format!("offset0 {offset0} is negative")));
        }
        for (d, &n) in dims.iter().enumerate() {
            if n <= 0 {
                return Err(plain(format!("dimension {d} has size {n}; sizes must be positive")));
            }
            let span =
                blocks.iter().filter(|b| b.dim == d).fold(1i64, |a, b| a.saturating_mul(b.size));
            if !blocks.iter().any(|b| b.dim == d) {
                return Err(plain(format!("dimension {d} has no block")));
            }
            if span < n {
                return Err(plain(format!(
                    "the blocks of dimension {d} span {span} indices, fewer than its size {n}"
                )));
            }
        }
        for b in &blocks {
            if b.dim >= dims.len() {
                return Err(plain(format!("a block names dimension {} of {}", b.dim, dims.len())));
            }
            if b.size <= 0 || b.stride < 0 {
                return Err(plain(format!(
                    "a block of dimension {} has size {} and stride {}: sizes must be \
                     positive and strides non-negative",
                    b.dim, b.size, b.stride
                )));
            }
        }
        let l = Layout { ty, dims, offset0, blocks };
        if l.size_elems().is_none() {
            return Err(plain("the layout spans more than 2^62 elements".into()));
        }
        Ok(l)
    }

    /// A dense layout in the given dimension order (outermost first), e.g. `[1, 0]` for a
    /// column-major matrix.
    pub fn dense(ty: Scalar, dims: &[i64], order: &[usize]) -> Result<Layout, LayoutError> {
        let mut blocks: Vec<Block> = Vec::new();
        let mut stride = 1;
        for &d in order.iter().rev() {
            let size = *dims.get(d).ok_or_else(|| plain(format!("no dimension {d}")))?;
            blocks.insert(0, Block { dim: d, size, stride });
            stride = stride.saturating_mul(size);
        }
        Layout::new(ty, dims.to_vec(), 0, blocks)
    }

    /// Parses oneDNN notation with the default names (`a` = dimension 0, ...); see the
    /// module docs. `dims` is required when a block has no size.
    pub fn parse(text: &str, ty: Scalar, dims: Option<&[i64]>) -> Result<Layout, LayoutError> {
        Layout::parse_named(text, DEFAULT_NAMES, ty, dims)
    }

    /// Parses oneDNN notation where `names[i]` (a lower-case letter) names dimension `i`.
    /// The number of dimensions is the number of names that occur (they must be a prefix
    /// of `names`), or `dims.len()`.
    pub fn parse_named(
        text: &str,
        names: &str,
        ty: Scalar,
        dims: Option<&[i64]>,
    ) -> Result<Layout, LayoutError> {
        let at = |column: usize, message: String| LayoutError {
            text: Some(text.to_string()),
            column,
            message,
        };
        // (dim, size if written, stride if written, column)
        let mut raw: Vec<(usize, Option<i64>, Option<i64>, usize)> = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        let number = |i: &mut usize| -> Option<i64> {
            let start = *i;
            while *i < chars.len() && chars[*i].is_ascii_digit() {
                *i += 1;
            }
            let s: String = chars[start..*i].iter().collect();
            (start < *i).then(|| s.parse::<i64>().unwrap_or(i64::MAX))
        };
        let mut i = 0;
        if chars.is_empty() {
            return Err(at(1, "empty layout".into()));
        }
        while i < chars.len() {
            let col = i + 1;
            let size = number(&mut i);
            let Some(&ch) = chars.get(i) else {
                return Err(at(i + 1, "a size must be followed by a dimension letter".into()));
            };
            let dim = names.chars().position(|n| n == ch.to_ascii_lowercase());
            let Some(dim) = dim.filter(|_| ch.is_ascii_alphabetic()) else {
                return Err(at(
                    i + 1,
                    format!("`{ch}` is not a dimension (dimensions are named by `{names}`)"),
                ));
            };
            if ch.is_ascii_uppercase() && size.is_some() {
                return Err(at(col, format!("`{ch}` is an outer block and takes no size")));
            }
            if size.is_some_and(|s| s <= 0 || s > 1 << 31) {
                return Err(at(col, "block sizes must be between 1 and 2^31".into()));
            }
            i += 1;
            let mut stride = None;
            if chars.get(i) == Some(&'[') {
                let scol = i + 1;
                i += 1;
                let need = || at(scol, "`[` needs a stride and `]`".into());
                stride = Some(number(&mut i).ok_or_else(need)?);
                if chars.get(i) != Some(&']') {
                    return Err(need());
                }
                i += 1;
                if stride.is_some_and(|s| s > 1 << 40) {
                    return Err(at(scol, "stride too large".into()));
                }
            }
            raw.push((dim, size, stride, col));
        }
        let ndims = match dims {
            Some(d) => d.len(),
            None => raw.iter().map(|r| r.0 + 1).max().unwrap_or(0),
        };
        for &(d, _, _, col) in &raw {
            if d >= ndims {
                return Err(at(col, format!("dimension {d} of a {ndims}-D layout")));
            }
        }
        for d in 0..ndims {
            let name = names.chars().nth(d).unwrap_or('?');
            let open: Vec<usize> =
                raw.iter().filter(|r| r.0 == d && r.1.is_none()).map(|r| r.3).collect();
            if !raw.iter().any(|r| r.0 == d) {
                return Err(at(text.len() + 1, format!("dimension `{name}` has no block")));
            }
            if open.len() > 1 {
                return Err(at(open[1], format!("`{name}` has two blocks without a size")));
            }
            if !open.is_empty() && dims.is_none() {
                return Err(at(
                    open[0],
                    format!("the block of `{name}` has no size and no dimension sizes were given"),
                ));
            }
        }
        let mut sizes = Vec::new();
        for d in 0..ndims {
            let fixed =
                raw.iter().filter(|r| r.0 == d).filter_map(|r| r.1).fold(1i64, i64::saturating_mul);
            sizes.push(match dims {
                Some(ds) => ds[d],
                None => fixed,
            });
        }
        let mut blocks = Vec::new();
        let mut stride = 1i64;
        for &(d, size, st, _) in raw.iter().rev() {
            let size = size.unwrap_or_else(|| {
                let fixed = raw
                    .iter()
                    .filter(|r| r.0 == d)
                    .filter_map(|r| r.1)
                    .fold(1i64, i64::saturating_mul);
                sizes[d].saturating_add(fixed - 1) / fixed
            });
            let s = st.unwrap_or(stride);
            blocks.insert(0, Block { dim: d, size, stride: s });
            stride = s.saturating_mul(size);
        }
        Layout::new(ty, sizes, 0, blocks).map_err(|e| at(1, e.message))
    }

    /// The notation with explicit sizes (and `[stride]` where a block is not dense against
    /// its inner neighbour); parses back to this layout with [`Layout::parse_named`] and
    /// the same names (`offset0` is not part of the notation).
    pub fn notation(&self, names: &str) -> String {
        let mut out = Vec::new();
        let mut dense = 1i64;
        for b in self.blocks.iter().rev() {
            let name = names.chars().nth(b.dim).unwrap_or('?');
            if b.stride == dense {
                out.push(format!("{}{name}", b.size));
            } else {
                out.push(format!("{}{name}[{}]", b.size, b.stride));
            }
            dense = b.stride.saturating_mul(b.size);
        }
        out.reverse();
        out.concat()
    }

    /// The element type.
    pub fn ty(&self) -> Scalar {
        self.ty
    }

    /// The logical dimension sizes.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The blocks, outermost first.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Where element `(0, ..., 0)` lies, in elements.
    pub fn offset0(&self) -> i64 {
        self.offset0
    }

    /// The same layout starting `offset0` elements into the buffer.
    pub fn with_offset0(mut self, offset0: i64) -> Result<Layout, LayoutError> {
        if offset0 < 0 {
            return Err(plain(format!("offset0 {offset0} is negative")));
        }
        self.offset0 = offset0;
        if self.size_elems().is_none() {
            return Err(plain("the layout spans more than 2^62 elements".into()));
        }
        Ok(self)
    }

    /// The elements a buffer must hold for every index of every block (padding included):
    /// `offset0 + sum((size - 1) * stride) + 1`; `None` past 2^62.
    pub fn size_elems(&self) -> Option<i64> {
        let mut n = self.offset0;
        for b in &self.blocks {
            n = n.checked_add((b.size - 1).checked_mul(b.stride)?)?;
        }
        n.checked_add(1).filter(|&n| n <= 1 << 62)
    }

    /// The block indices of coordinate `x` of dimension `d`, outermost block first.
    fn split(&self, d: usize) -> Vec<usize> {
        self.blocks.iter().enumerate().filter(|(_, b)| b.dim == d).map(|(i, _)| i).collect()
    }

    /// The offset of an element, in elements (the direct computation).
    pub fn offset_of(&self, idx: &[i64]) -> i64 {
        let mut off = self.offset0;
        for (d, &x) in idx.iter().enumerate() {
            let bs = self.split(d);
            let mut rest = x;
            for (n, &bi) in bs.iter().rev().enumerate() {
                let b = self.blocks[bi];
                // The outermost block of a dimension takes what is left, without wrapping.
                let i = if n + 1 == bs.len() { rest } else { rest % b.size };
                rest /= b.size;
                off += i * b.stride;
            }
        }
        off
    }

    /// The offset of the element at `idx` (`i32` expressions, one per dimension) as an
    /// `i32` expression, folded where indices are constant.
    pub fn offset(&self, idx: &[Expr]) -> Expr {
        let mut off = ix::c(self.offset0);
        for (d, x) in idx.iter().enumerate() {
            let bs = self.split(d);
            let mut inner = 1;
            for (n, &bi) in bs.iter().rev().enumerate() {
                let b = self.blocks[bi];
                let q = ix::div(x, inner);
                let i = if n + 1 == bs.len() { q } else { ix::rem(&q, b.size) };
                off = ix::add(&off, &ix::mul(&i, &ix::c(b.stride)));
                inner *= b.size;
            }
        }
        off
    }

    /// True if every element offset fits in an `i32` (the generator's index type).
    pub fn fits_i32(&self) -> bool {
        self.size_elems().is_some_and(|n| n <= i32::MAX as i64)
    }
}

impl fmt::Display for Layout {
    /// `f32 4a2b7c7d32a32b` (default names), with `+offset0` when it is not 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.ty, self.notation(DEFAULT_NAMES))?;
        if self.offset0 != 0 {
            write!(f, " +{}", self.offset0)?;
        }
        Ok(())
    }
}
