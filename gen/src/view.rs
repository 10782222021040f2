//! [`View`]: a virtual tensor over a real one, as in oneDNN's generator.
//!
//! A view has `m` virtual dimensions `v0..v(m-1)` (each with a size and a GEMM kind, M, N
//! or K) over an underlying tensor of `n` dimensions stored in a [`Layout`]. Tensor
//! coordinate `j` is `t_j = F_j(v0, ..., v(m-1))`, an `i32` IR expression over the virtual
//! dimensions' variables, and may carry an access mask: a `bool` expression over `t_j`'s own
//! variable. Where a mask is false the element reads as 0 and is never stored.
//!
//! A view over another view ([`View::new`] with [`Base::View`]) is composed at once into a
//! view over the inner view's memory: the inner mapping functions are substituted with the
//! outer ones, and the outer masks become conditions of the composed view.
//!
//! A view is checked when it is made: every unmasked tensor coordinate must provably stay
//! within its dimension over the whole virtual box (interval arithmetic on the mapping),
//! so an access through a view, with its masks, never leaves the buffer.
//!
//! oneDNN's example of views, the source of a 2-D convolution with a 3x3 filter (stride 1,
//! padding 1, no dilation) over an `NCHW` tensor of 2x3x5x5:
//!
//! ```
//! use kiln_gen::layout::Layout;
//! use kiln_gen::view::{Base, DimKind, TDim, VDim, View};
//! use kiln_ir::Scalar;
//! let (sh, sw, dh, dw, ph, pw) = (1, 1, 0, 0, 1, 1);
//! let src = Layout::parse_named("NCHW", "nchw", Scalar::F32, Some(&[2, 3, 5, 5])).unwrap();
//! let mb = VDim::new("mb", 2, DimKind::M);
//! let ic = VDim::new("ic", 3, DimKind::K);
//! let oh = VDim::new("oh", 5, DimKind::M);
//! let ow = VDim::new("ow", 5, DimKind::M);
//! let kh = VDim::new("kh", 3, DimKind::K);
//! let kw = VDim::new("kw", 3, DimKind::K);
//! let ih = oh.var() * sh + kh.var() * (dh + 1) - ph;
//! let iw = ow.var() * sw + kw.var() * (dw + 1) - pw;
//! let tdims = vec![
//!     TDim::new("mb", mb.var()),
//!     TDim::new("ic", ic.var()),
//!     TDim::bounded("ih", ih, 5),
//!     TDim::bounded("iw", iw, 5),
//! ];
//! let v = View::new(Base::Layout(src), vec![mb, ic, oh, ow, kh, kw], tdims).unwrap();
//! // Output (0, 0) with filter tap (0, 0) reads the padding: masked.
//! assert_eq!(v.offset_at(&[0, 0, 0, 0, 0, 0]).unwrap(), None);
//! // Output (1, 2), tap (2, 0), channel 1 of image 1 reads ih = 2, iw = 1.
//! assert_eq!(v.offset_at(&[1, 1, 1, 2, 2, 0]).unwrap(), Some(((1 * 3 + 1) * 5 + 2) * 5 + 1));
//! assert_eq!(v.to_string().lines().next(), Some("view mb:2:M ic:3:K oh:5:M ow:5:M kh:3:K kw:3:K"));
//! ```

use std::collections::HashMap;
use std::fmt;

use kiln_ir::{BinOp, Expr, ExprNode, Imm, Intrinsic, Type, Var, Visitor};

use crate::ix;
use crate::layout::Layout;

/// How a virtual dimension takes part in a GEMM `C[M, N] += A[M, K] * B[K, N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimKind {
    /// A row dimension of A and C.
    M,
    /// A column dimension of B and C.
    N,
    /// A reduction dimension of A and B.
    K,
    /// A batch dimension of A, B and C: one independent GEMM per index (a batched GEMM).
    Batch,
}

/// A virtual dimension: a name (its `i32` variable's name), a size and a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VDim {
    /// The name, also the name of its variable in mapping functions.
    pub name: String,
    /// The number of indices.
    pub size: i64,
    /// Its GEMM role.
    pub kind: DimKind,
}

impl VDim {
    /// A virtual dimension.
    pub fn new(name: &str, size: i64, kind: DimKind) -> VDim {
        VDim { name: name.to_string(), size, kind }
    }

    /// Its variable (`i32`), for writing mapping functions.
    pub fn var(&self) -> Expr {
        Var::new(&self.name, Type::I32).expr()
    }
}

/// A tensor coordinate of a view: its mapping function and optional mask.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TDim {
    /// The coordinate's name (the name of the variable its mask refers to).
    pub name: String,
    /// `t_j = F_j(v)`, an `i32` expression over the virtual dimensions' variables.
    pub map: Expr,
    /// The access mask, a `bool` expression over the variable `name`.
    pub mask: Option<Expr>,
}

impl TDim {
    /// An unmasked coordinate.
    pub fn new(name: &str, map: Expr) -> TDim {
        TDim { name: name.to_string(), map, mask: None }
    }

    /// A coordinate masked to `0 <= t < size`.
    pub fn bounded(name: &str, map: Expr, size: i64) -> TDim {
        let t = Var::new(name, Type::I32).expr();
        let mask = t.cmp_ge(ix::c(0)).logic_and(t.cmp_lt(ix::c(size)));
        TDim { name: name.to_string(), map, mask: Some(mask) }
    }

    /// A coordinate with the given mask over [`TDim::var`].
    pub fn masked(name: &str, map: Expr, mask: Expr) -> TDim {
        TDim { name: name.to_string(), map, mask: Some(mask) }
    }

    /// The coordinate's variable (`i32`), for writing masks.
    pub fn var(&self) -> Var {
        Var::new(&self.name, Type::I32)
    }
}

/// What a view looks at: memory, or another view.
#[derive(Clone, Debug)]
pub enum Base {
    /// A tensor in memory.
    Layout(Layout),
    /// Another view, whose virtual dimensions are this view's tensor dimensions.
    View(Box<View>),
}

/// A view, composed down to memory: virtual dimensions, the mapping to the memory tensor's
/// coordinates, and the masks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    vdims: Vec<VDim>,
    tdims: Vec<TDim>,
    /// Conditions over the virtual variables that composition carried over from outer views.
    extra: Vec<Expr>,
    layout: Layout,
}

/// An access through a view: the element offset and the condition under which it is real.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The element offset in the buffer (`i32`).
    pub offset: Expr,
    /// `None` when always in bounds; otherwise a `bool`: false means "reads 0, not stored".
    pub mask: Option<Expr>,
}

struct Vars(Vec<Var>);

impl Visitor for Vars {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            if !self.0.contains(v) {
                self.0.push(v.clone());
            }
        }
        kiln_ir::walk_expr(self, e);
    }
}

fn vars_of(e: &Expr) -> Vec<Var> {
    let mut v = Vars(Vec::new());
    v.visit_expr(e);
    v.0
}

/// The range `[lo, hi]` of an `i32` expression when each variable ranges over `env`; None
/// when it cannot be bounded.
fn range(e: &Expr, env: &HashMap<Var, (i64, i64)>) -> Option<(i64, i64)> {
    let r = match e.node() {
        ExprNode::Imm(i) => {
            let v = i.as_i128()? as i64;
            (v, v)
        }
        ExprNode::Var(v) => *env.get(v)?,
        ExprNode::Binary { op, a, b } => {
            let (al, ah) = range(a, env)?;
            let (bl, bh) = range(b, env)?;
            match op {
                BinOp::Add => (al.checked_add(bl)?, ah.checked_add(bh)?),
                BinOp::Sub => (al.checked_sub(bh)?, ah.checked_sub(bl)?),
                BinOp::Mul => {
                    let p = [al * bl, al * bh, ah * bl, ah * bh];
                    (*p.iter().min()?, *p.iter().max()?)
                }
                BinOp::Div if bl == bh && bl > 0 && al >= 0 => (al / bl, ah / bl),
                BinOp::Rem if bl == bh && bl > 0 && al >= 0 => (0, ah.min(bl - 1)),
                _ => return None,
            }
        }
        ExprNode::Intrinsic { op: Intrinsic::Min, args } if args.len() == 2 => {
            let (al, ah) = range(&args[0], env)?;
            let (bl, bh) = range(&args[1], env)?;
            (al.min(bl), ah.min(bh))
        }
        ExprNode::Intrinsic { op: Intrinsic::Max, args } if args.len() == 2 => {
            let (al, ah) = range(&args[0], env)?;
            let (bl, bh) = range(&args[1], env)?;
            (al.max(bl), ah.max(bh))
        }
        _ => return None,
    };
    // Past i32, the kernel's arithmetic would wrap: refuse.
    (r.0 >= i32::MIN as i64 && r.1 <= i32::MAX as i64).then_some(r)
}

impl View {
    /// A view with the given virtual dimensions over `base`, whose coordinate `j` is
    /// `tdims[j]`. Fails (naming the problem) when a mapping function is not `i32`, uses a
    /// variable that is not a virtual dimension, a mask uses another variable than its
    /// coordinate's, the counts disagree, or an unmasked coordinate may leave its dimension.
    pub fn new(base: Base, vdims: Vec<VDim>, tdims: Vec<TDim>) -> Result<View, String> {
        let vvars: Vec<Var> = vdims.iter().map(|d| Var::new(&d.name, Type::I32)).collect();
        for (i, d) in vdims.iter().enumerate() {
            if d.size <= 0 {
                return Err(format!("virtual dimension `{}` has size {}", d.name, d.size));
            }
            if vdims[..i].iter().any(|e| e.name == d.name) {
                return Err(format!("two virtual dimensions are named `{}`", d.name));
            }
        }
        let base_dims: Vec<i64> = match &base {
            Base::Layout(l) => l.dims().to_vec(),
            Base::View(v) => v.vdims.iter().map(|d| d.size).collect(),
        };
        if tdims.len() != base_dims.len() {
            return Err(format!(
                "{} mapping functions for a {}-dimensional tensor",
                tdims.len(),
                base_dims.len()
            ));
        }
        let box_env: HashMap<Var, (i64, i64)> =
            vvars.iter().zip(&vdims).map(|(v, d)| (v.clone(), (0, d.size - 1))).collect();
        for (t, &size) in tdims.iter().zip(&base_dims) {
            if t.map.ty() != Type::I32 {
                return Err(format!("`{} = {}` is {}, not i32", t.name, t.map, t.map.ty()));
            }
            if let Some(v) = vars_of(&t.map).into_iter().find(|v| !vvars.contains(v)) {
                return Err(format!(
                    "`{} = {}` uses `{v}`, not a virtual dimension",
                    t.name, t.map
                ));
            }
            match &t.mask {
                Some(m) => {
                    if m.ty() != Type::BOOL {
                        return Err(format!("the mask of `{}` is not bool: `{m}`", t.name));
                    }
                    if let Some(v) = vars_of(m).into_iter().find(|v| *v != t.var()) {
                        return Err(format!("the mask of `{}` uses `{v}`: `{m}`", t.name));
                    }
                }
                None => match range(&t.map, &box_env) {
                    Some((lo, hi)) if lo >= 0 && hi < size => {}
                    Some((lo, hi)) => {
                        return Err(format!(
                            "`{} = {}` ranges over {lo}..={hi}, outside 0..{size}, and has no mask",
                            t.name, t.map
                        ))
                    }
                    None => {
                        return Err(format!(
                            "cannot bound `{} = {}`; give it a mask",
                            t.name, t.map
                        ))
                    }
                },
            }
        }
        match base {
            Base::Layout(layout) => Ok(View { vdims, tdims, extra: Vec::new(), layout }),
            Base::View(inner) => {
                // Substitute the outer mappings for the inner view's virtual variables.
                let inner_vars: HashMap<Var, Expr> = inner
                    .vdims
                    .iter()
                    .zip(&tdims)
                    .map(|(d, t)| (Var::new(&d.name, Type::I32), t.map.clone()))
                    .collect();
                let composed = inner
                    .tdims
                    .iter()
                    .map(|t| TDim {
                        name: t.name.clone(),
                        map: ix::subst(&t.map, &inner_vars),
                        mask: t.mask.clone(),
                    })
                    .collect();
                let mut extra: Vec<Expr> =
                    inner.extra.iter().map(|e| ix::subst(e, &inner_vars)).collect();
                for t in &tdims {
                    if let Some(m) = &t.mask {
                        let map = HashMap::from([(t.var(), t.map.clone())]);
                        extra.push(ix::subst(m, &map));
                    }
                }
                Ok(View { vdims, tdims: composed, extra, layout: inner.layout })
            }
        }
    }

    /// The virtual dimensions.
    pub fn vdims(&self) -> &[VDim] {
        &self.vdims
    }

    /// The memory tensor's coordinates, composed down to memory.
    pub fn tdims(&self) -> &[TDim] {
        &self.tdims
    }

    /// The memory layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The virtual dimensions of a kind, in order.
    pub fn dims_of(&self, kind: DimKind) -> Vec<&VDim> {
        self.vdims.iter().filter(|d| d.kind == kind).collect()
    }

    /// The access at virtual coordinates `v` (`i32` expressions, one per virtual
    /// dimension): offset and mask. The caller keeps `v` within the virtual box.
    pub fn access(&self, v: &[Expr]) -> Access {
        // By name (the virtual dimensions' names are distinct): every element a generated
        // kernel touches comes through here.
        let map: Vec<(&str, Expr)> =
            self.vdims.iter().zip(v).map(|(d, e)| (d.name.as_str(), e.clone())).collect();
        let mut mask = None;
        for e in &self.extra {
            mask = ix::and(mask, Some(ix::subst_names(e, &map)));
        }
        let mut coords = Vec::with_capacity(self.tdims.len());
        for t in &self.tdims {
            let tj = ix::subst_names(&t.map, &map);
            if let Some(m) = &t.mask {
                let m = ix::subst_names(m, &[(t.name.as_str(), tj.clone())]);
                mask = ix::and(mask, Some(m));
            }
            coords.push(tj);
        }
        Access { offset: self.layout.offset(&coords), mask }
    }

    /// The offset of virtual element `v` (within the virtual box), or None where masked:
    /// the view evaluated on numbers, for tests and tools.
    pub fn offset_at(&self, v: &[i64]) -> Result<Option<i64>, String> {
        if v.len() != self.vdims.len() {
            return Err(format!("{} coordinates for {} dimensions", v.len(), self.vdims.len()));
        }
        let env: HashMap<Var, Imm> = self
            .vdims
            .iter()
            .zip(v)
            .map(|(d, &x)| (Var::new(&d.name, Type::I32), ix::imm(x)))
            .collect();
        let a = self.access(&v.iter().map(|&x| ix::c(x)).collect::<Vec<_>>());
        if let Some(m) = &a.mask {
            if !ix::eval_bool(m, &env)? {
                return Ok(None);
            }
        }
        ix::eval_i64(&a.offset, &env).map(Some)
    }
}

impl fmt::Display for View {
    /// `view NAME:SIZE:KIND ...`, then one line per tensor coordinate, then the layout.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("view")?;
        for d in &self.vdims {
            write!(f, " {}:{}:{:?}", d.name, d.size, d.kind)?;
        }
        for t in &self.tdims {
            write!(f, "\n  {} = {}", t.name, t.map)?;
            if let Some(m) = &t.mask {
                write!(f, "  if {m}")?;
            }
        }
        for e in &self.extra {
            write!(f, "\n  if {e}")?;
        }
        write!(f, "\n  of {}", self.layout)
    }
}
