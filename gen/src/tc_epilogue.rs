//! Epilogues of the tensor-core GEMM ([`crate::tc`]): element-wise operations applied to each
//! f32 result of `A·B` before the one rounding to the output type, inside the GEMM's store.
//!
//! Each operation is also available as a stand-alone element-wise kernel
//! ([`elementwise_kernel`]), so that "GEMM, then bias, then ReLU, ..." run one after another
//! can be compared with the fused kernel: both compute the same f32 operations in the same
//! order, so on one device they give the same bits.

use std::fmt;

use kiln_ir::{AddrSpace, Attrs, Expr, Intrinsic, Kernel, NdRangeAttr, Scalar, Stmt, Type, Var};

use crate::ix::{self, c};

/// One element-wise step of an epilogue; `x` is the f32 value of element `(i, j)` of the
/// M x N result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EpOp {
    /// `x + bias[j]`: a per-column bias, parameter `bias: ptr<global, f32>` of N elements.
    Bias,
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh approximation written with `exp`: `x / (1 + exp(-1.595769 * (x +
    /// 0.044715 * x^3)))` (the same as `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`).
    Gelu,
    /// `x * alpha`: parameter `alpha: f32`.
    Scale,
    /// `x + res[i * N + j]`: an element-wise residual, parameter `res: ptr<global, T>` of
    /// M x N elements of the output type (read as f32).
    Add,
}

impl EpOp {
    /// Every operation.
    pub const ALL: [EpOp; 5] = [EpOp::Bias, EpOp::Relu, EpOp::Gelu, EpOp::Scale, EpOp::Add];

    /// The name used on the command line and in kernel names.
    pub fn name(self) -> &'static str {
        match self {
            EpOp::Bias => "bias",
            EpOp::Relu => "relu",
            EpOp::Gelu => "gelu",
            EpOp::Scale => "scale",
            EpOp::Add => "add",
        }
    }

    /// Parses [`EpOp::name`].
    pub fn from_name(s: &str) -> Option<EpOp> {
        EpOp::ALL.into_iter().find(|o| o.name() == s)
    }

    /// The parameter the operation reads, if any, for an output of type `out`.
    pub fn param(self, out: Scalar) -> Option<Var> {
        match self {
            EpOp::Bias => Some(bias_param()),
            EpOp::Scale => Some(scale_param()),
            EpOp::Add => Some(residual_param(out)),
            EpOp::Relu | EpOp::Gelu => None,
        }
    }
}

impl fmt::Display for EpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An ordered chain of epilogue operations (empty: the plain product).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Epilogue(pub Vec<EpOp>);

impl Epilogue {
    /// Parses a comma-separated list such as `bias,relu,scale`; an empty string is the empty
    /// chain.
    pub fn parse(s: &str) -> Result<Epilogue, String> {
        let mut ops = Vec::new();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let op = EpOp::from_name(w).ok_or_else(|| {
                let all: Vec<_> = EpOp::ALL.iter().map(|o| o.name()).collect();
                format!("unknown epilogue operation `{w}` (expected one of {})", all.join(", "))
            })?;
            ops.push(op);
        }
        let e = Epilogue(ops);
        e.check()?;
        Ok(e)
    }

    /// Refuses a chain that names an operation with a parameter twice (its parameter would
    /// be ambiguous).
    pub fn check(&self) -> Result<(), String> {
        for (i, op) in self.0.iter().enumerate() {
            if op.param(Scalar::F32).is_some() && self.0[..i].contains(op) {
                return Err(format!(
                    "epilogue operation `{op}` appears twice (its parameter would be shared)"
                ));
            }
        }
        Ok(())
    }

    /// The parameters the chain reads, in chain order, for an output of type `out`.
    pub fn params(&self, out: Scalar) -> Vec<Var> {
        self.0.iter().filter_map(|op| op.param(out)).collect()
    }

    /// `_bias_relu...` for kernel names; empty for the empty chain.
    pub fn suffix(&self) -> String {
        self.0.iter().map(|o| format!("_{o}")).collect()
    }
}

impl fmt::Display for Epilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.0.iter().map(|o| o.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// The f32 bias vector of [`EpOp::Bias`], one value per column.
fn bias_param() -> Var {
    Var::new("bias", Type::ptr(AddrSpace::Global, Scalar::F32))
}

/// The f32 factor of [`EpOp::Scale`].
fn scale_param() -> Var {
    Var::new("alpha", Type::F32)
}

/// The M x N residual of [`EpOp::Add`], of the output's element type.
fn residual_param(out: Scalar) -> Var {
    Var::new("res", Type::ptr(AddrSpace::Global, out))
}

/// The statements that apply `op` to the f32 variable `x` at row `i`, column `j` of an
/// M x N result with `n` columns; `params` are the op's parameter (see [`EpOp::param`]).
/// Returns the new value's expression; `pre` receives any `let`s it needs.
pub fn apply(
    op: EpOp,
    x: Expr,
    i: &Expr,
    j: &Expr,
    n: i64,
    out: Scalar,
    pre: &mut Vec<Stmt>,
) -> Expr {
    match op {
        EpOp::Bias => x + bias_param().load(j.clone()),
        EpOp::Relu => Expr::intrinsic(Intrinsic::Max, [x, Expr::f32(0.0)]),
        EpOp::Gelu => {
            let t = Var::new(format!("gelu_x{}", pre.len()), Type::F32);
            pre.push(Stmt::let_(&t, x));
            let x = t.expr();
            let inner = x.clone() + Expr::f32(0.044715) * x.clone() * x.clone() * x.clone();
            let e = Expr::intrinsic(Intrinsic::Exp, [Expr::f32(-1.595_769) * inner]);
            x / (Expr::f32(1.0) + e)
        }
        EpOp::Scale => x * scale_param().expr(),
        EpOp::Add => {
            let at = ix::add(&ix::mul(i, &c(n)), j);
            x + crate::codegen::load_f32(&residual_param(out), at)
        }
    }
}

/// A stand-alone kernel applying `op` to an M x N f32 buffer `y` in place (one work-item per
/// element, 256 per work-group, `#nd_range` set), or, with `op` `None`, converting `y` to
/// `out` into `c` (the final rounding). Running the GEMM with an f32 output, then these
/// kernels for each operation of an epilogue, then the conversion, computes what the fused
/// kernel computes, one kernel after another.
pub fn elementwise_kernel(op: Option<EpOp>, m: i64, n: i64, out: Scalar) -> Kernel {
    const LOCAL: u32 = 256;
    let total = m * n;
    let y = Var::new("y", Type::ptr(AddrSpace::Global, Scalar::F32));
    let gid = Var::new("e", Type::I32);
    let (i, j) = (Var::new("i", Type::I32), Var::new("j", Type::I32));
    let mut body =
        vec![Stmt::let_(&i, ix::div(&gid.expr(), n)), Stmt::let_(&j, ix::rem(&gid.expr(), n))];
    let x = y.load(gid.expr());
    let mut params = vec![y.clone()];
    let name = match op {
        Some(op) => {
            let v = apply(op, x, &i.expr(), &j.expr(), n, out, &mut body);
            body.push(Stmt::store(&y, gid.expr(), v));
            params.extend(op.param(out));
            format!("ep_{op}_{m}x{n}")
        }
        None => {
            let cv = Var::new("c", Type::ptr(AddrSpace::Global, out));
            let v = if out == Scalar::F32 { x } else { x.cast(out) };
            body.push(Stmt::store(&cv, gid.expr(), v));
            params.push(cv);
            format!("ep_cvt_{out}_{m}x{n}")
        }
    };
    let global = (total as u32).div_ceil(LOCAL) * LOCAL;
    let all = vec![
        Stmt::let_(&gid, Expr::global_id(0).cast(Scalar::I32)),
        Stmt::if_(gid.expr().cmp_lt(c(total)), Stmt::block(body)),
    ];
    let attrs = Attrs {
        nd_range: Some(NdRangeAttr {
            offset: vec![0],
            global: vec![global],
            local: Some(vec![LOCAL]),
        }),
        ..Attrs::default()
    };
    Kernel::with_attrs(name, params, attrs, Stmt::block(all))
}

/// The tensor-core GEMM with `p`'s epilogue as kiln's epilogue fusion builds it: the plain
/// GEMM (f32 output), then one [`elementwise_kernel`] per operation, in place on its
/// output, then (for an f16/bf16 output) the conversion into `c`, listed for
/// [`kiln_passes::fusion::fuse_kernels`] with `epilogue = true`: each element-wise kernel
/// runs at the GEMM's store of its element. The f32 result is internalized when a
/// conversion follows it. The fused kernel's parameters are `a, b`, then `c` for an f32
/// output, then each operation's parameter in order, then `c` of the output type.
///
/// The generator's own epilogue ([`crate::tc`]) composes the same operations where it
/// stores; `gen/tests/tc_epilogue_fusion.rs` checks that both give the same bits.
pub fn fusion_list(
    p: &crate::TcGemmProblem,
    cfg: &crate::TcConfig,
) -> Result<(kiln_ir::Module, kiln_passes::fusion::FusionSpec), String> {
    use kiln_passes::fusion::{FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec};
    let plain =
        crate::TcGemmProblem { out: Scalar::F32, epilogue: Epilogue::default(), ..p.clone() };
    let gemm = plain.generate(cfg)?.kernel;
    let range = |k: &Kernel| {
        let nd = k.attrs().nd_range.clone().expect("generated kernels carry their range");
        let r = RangeSpec::new(&nd.global).with_offset(&nd.offset);
        match nd.local {
            Some(l) => r.with_local(&l),
            None => r,
        }
    };
    let mut kernels = vec![gemm];
    for &op in &p.epilogue.0 {
        kernels.push(elementwise_kernel(Some(op), p.m, p.n, p.out));
    }
    if p.out != Scalar::F32 {
        kernels.push(elementwise_kernel(None, p.m, p.n, p.out));
    }
    // The GEMM's `c` is every element-wise kernel's `y`.
    let mut y = vec![ParamRef::new(0, 2)];
    y.extend((1..kernels.len()).map(|e| ParamRef::new(e, 0)));
    let promote = (p.out != Scalar::F32)
        .then(|| Promotion {
            param: ParamRef::new(0, 2),
            to: PromoteTo::Private,
            size: None,
            buffer_len: None,
        })
        .into_iter()
        .collect();
    let spec = FusionSpec {
        name: p.name(),
        kernels: kernels.iter().map(|k| k.name().to_string()).collect(),
        ndranges: kernels.iter().map(range).collect(),
        identical: vec![y],
        promote,
        epilogue: true,
        ..FusionSpec::default()
    };
    // A repeated operation (`relu,relu`) is one kernel listed twice.
    let mut distinct: Vec<Kernel> = Vec::new();
    for k in kernels {
        if !distinct.iter().any(|d| d.name() == k.name()) {
            distinct.push(k);
        }
    }
    Ok((kiln_ir::Module::new(distinct), spec))
}
