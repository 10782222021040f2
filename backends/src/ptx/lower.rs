//! Lowering of one kernel: statements, expressions, memory and the kernel's frame.

// hashbrown (foldhash): the maps here are looked up for every value a kernel reads, and std's
// SipHash was a tenth of the lowering's time.
use hashbrown::{HashMap, HashSet};
use std::fmt::Write;

use kiln_ir::scope::Scopes;
use kiln_ir::{
    AddrSpace, AtomicOp, BinOp, Builtin, Expr, ExprNode, FuncKind, Imm, Intrinsic, Kernel, Scalar,
    Stmt, StmtNode, Type, Visitor,
};
use kiln_passes::vectors::{stmt_in_memory_form, StmtLanes};

mod expr;
mod matrix;
mod scan;
mod vector;
mod wgmma;

use super::regs::{arith_ty, bits_ty, imm_val, mem_ty, Addr, Class, Reg, RegFile, Val};
use super::{Options, OFFSET_PARAMS};
use scan::Scan;

type R<T> = Result<T, String>;

/// A pointer's memory: its PTX state space, element type and 64-bit base address.
#[derive(Clone, Debug)]
struct Mem {
    space: &'static str,
    elem: Scalar,
    base: Reg,
}

#[derive(Clone, Debug)]
enum Binding {
    /// An immutable value (`let`, parameters, loop counters, atomic results).
    Val(Val),
    /// A `var`'s register.
    Var(Reg),
    /// A pointer parameter or array.
    Mem(Mem),
    /// A vector `let`: one value per lane.
    Vector(Vec<Val>),
    /// A fragment: this lane's registers (see `matrix.rs` for the layout).
    Frag(Vec<Reg>),
}

struct Lower<'k> {
    kernel: &'k Kernel,
    regs: RegFile,
    body: String,
    decls: String,
    scopes: Scopes<Binding>,
    mutable: HashSet<Reg>,
    builtins: HashMap<(Builtin, u8), Reg>,
    locals: HashMap<String, Mem>,
    labels: u32,
    arrays: u32,
    /// Addresses computed in the current straight-line stretch: (base, index) -> address.
    addrs: HashMap<(Reg, Val), Reg>,
    /// `let`s bound to `x + C` (a signed index plus a positive constant): their register
    /// -> (`x`, `C`), so an access at such an index folds `C` into the address.
    offsets: HashMap<Reg, (Val, i128)>,
    fast: bool,
    /// Code run once at entry, before the body: values that depend only on the lane.
    entry: String,
    /// `ldmatrix`'s per-lane element offset for a constant stride, computed in `entry`:
    /// (stride, count, transposed role/layout) -> register.
    lane_offsets: HashMap<(u32, usize, bool), Reg>,
    /// Tensor maps `tma_load` reads (hidden parameters, see `wgmma.rs`).
    tmaps: Vec<wgmma::TensorMap>,
    /// Alignment of each local array: 1024 bytes where warpgroup operations address them
    /// through a swizzle, else 16.
    local_align: u64,
    /// True once a `setmaxnreg` is lowered: the entry then declares its register budget.
    setmaxnreg: bool,
    /// Vector lowering for the statements that are not in the memory form.
    vlanes: StmtLanes<'k>,
}

/// Lowers one kernel to a `.visible .entry` (no module header). `align` is its local
/// arrays' alignment ([`local_align_of`]) and `dynamic` its [`dynamic_shared_bytes`], both
/// found by the caller, which needs them first.
pub(super) fn lower_kernel(
    kernel: &Kernel,
    _options: &Options,
    align: u64,
    dynamic: u64,
) -> R<String> {
    let mut l = Lower {
        kernel,
        regs: RegFile::default(),
        body: String::with_capacity(2048),
        decls: String::new(),
        scopes: Scopes::default(),
        mutable: HashSet::new(),
        builtins: HashMap::new(),
        locals: HashMap::new(),
        labels: 0,
        arrays: 0,
        entry: String::new(),
        lane_offsets: HashMap::new(),
        tmaps: Vec::new(),
        local_align: align,
        setmaxnreg: false,
        addrs: HashMap::new(),
        offsets: HashMap::new(),
        fast: kernel.attrs().fast_math,
        vlanes: StmtLanes::new(kernel),
    };
    let name = kernel.name();
    let mut params = Vec::new();
    for (i, p) in kernel.params().iter().enumerate() {
        let pname = format!("{name}_param_{i}");
        match p.ty() {
            Type::Vector(..) | Type::Frag(_) => {
                return Err(format!("parameter `{}` of type {}", p.name(), p.ty()))
            }
            Type::Ptr(space, elem) => {
                let space = match space {
                    AddrSpace::Global | AddrSpace::Constant => ".global",
                    AddrSpace::Generic => "",
                    s => return Err(format!("pointer parameter `{}` in {s} memory", p.name())),
                };
                params.push(format!("\t.param .u64 {pname}"));
                let base = l.regs.fresh(Class::B64);
                l.ins(format_args!("ld.param.u64 {base}, [{pname}]"));
                if !space.is_empty() {
                    l.ins(format_args!("cvta.to.global.u64 {base}, {base}"));
                }
                l.bind(p.name_arc(), Binding::Mem(Mem { space, elem, base }));
            }
            Type::Scalar(s) => {
                params.push(format!("\t.param .{} {pname}", mem_ty(s)));
                let v = if s == Scalar::Bool {
                    let r = l.regs.fresh(Class::B32);
                    l.ins(format_args!("ld.param.u8 {r}, [{pname}]"));
                    let p = l.regs.fresh(Class::Pred);
                    l.ins(format_args!("setp.ne.u32 {p}, {r}, 0"));
                    p
                } else {
                    let r = l.regs.fresh(Class::of(s));
                    l.ins(format_args!("ld.param.{} {r}, [{pname}]", mem_ty(s)));
                    r
                };
                l.bind(p.name_arc(), Binding::Val(Val::Reg(v)));
            }
        }
    }
    for o in OFFSET_PARAMS {
        params.push(format!("\t.param .u32 {o}"));
    }

    let mut scan = Scan { kernel: Some(kernel), ..Scan::default() };
    scan.visit_stmt(kernel.body());
    l.prologue(&scan)?;
    l.block(kernel.body())?;
    l.ins(format_args!("ret"));

    let mut out = String::new();
    let (map_params, map_lines) = wgmma::tensor_map_decls(name, &l.tmaps);
    params.extend(map_params);
    out.push_str(&map_lines);
    if dynamic > 0 {
        // Launchers read this line: the kernel runs only with this many bytes of dynamic
        // shared memory (and the function's limit raised to match past 48 KiB).
        let _ = writeln!(out, "// kiln.dynamic_shared_bytes {name} {dynamic}");
        // PTX allows `.extern .shared` only at module scope.
        let _ = writeln!(out, ".extern .shared .align {} .b8 {name}_dynamic[];", l.local_align);
    }
    let _ = write!(out, ".visible .entry {name}(\n{}\n)\n", params.join(",\n"));
    match kernel.attrs().reqd_work_group_size {
        Some([x, y, z]) => {
            let _ = writeln!(out, ".reqntid {x}, {y}, {z}");
            // ptxas honours `setmaxnreg` only when it knows the register count at entry,
            // which the thread count and one work-group per multiprocessor fix (65536 /
            // threads, rounded down to 8); without it the instructions are ignored (C7508).
            if l.setmaxnreg {
                let _ = writeln!(out, ".minnctapersm 1");
            }
        }
        None if l.setmaxnreg => {
            return Err(format!(
                "kernel `{name}` uses `setmaxnreg` without `#reqd_work_group_size`: ptxas must \
                 know the work-group size to fix the register count the budgets start from"
            ));
        }
        None => {}
    }
    out.push_str("{\n");
    out.push_str(&l.regs.declarations());
    out.push_str(&l.decls);
    out.push('\n');
    out.push_str(&l.entry);
    out.push_str(&l.body);
    out.push_str("}\n");
    Ok(out)
}

impl Lower<'_> {
    /// Appends one instruction. Takes `format_args!` so the text goes straight into the
    /// body instead of through a temporary `String` per instruction.
    fn ins(&mut self, s: std::fmt::Arguments<'_>) {
        self.body.push('\t');
        let _ = self.body.write_fmt(s);
        self.body.push_str(";\n");
    }

    /// Appends `op.ty d, a, b, ...` as [`Lower::ins`] would, without the formatting
    /// machinery: the arithmetic of an unrolled kernel (the GEMM's thousands of `fma`s) is
    /// most of its instructions.
    fn ins_ops(&mut self, op: &str, ty: &str, d: Reg, srcs: &[&Val]) {
        let b = &mut self.body;
        b.push('\t');
        b.push_str(op);
        b.push('.');
        b.push_str(ty);
        b.push(' ');
        d.push_to(b);
        for v in srcs {
            b.push_str(", ");
            match v {
                Val::Reg(r) => r.push_to(b),
                Val::Imm(t) => b.push_str(t.as_str()),
            }
        }
        b.push_str(";\n");
    }

    fn label(&mut self) -> String {
        self.labels += 1;
        format!("$L__BB{}", self.labels)
    }

    fn place(&mut self, label: &str) {
        // A join point: addresses computed before it may not dominate what follows.
        self.addrs.clear();
        let _ = writeln!(self.body, "{label}:");
    }

    fn bind(&mut self, name: &std::sync::Arc<str>, b: Binding) {
        // The variable's own name handle: no copy of its text per binding.
        self.scopes.bind_shared(name, b);
    }

    fn lookup(&self, name: &str) -> R<&Binding> {
        self.scopes.get(name).ok_or_else(|| format!("ill-formed kernel: `{name}` is not bound"))
    }

    fn mem(&self, name: &str) -> R<Mem> {
        match self.lookup(name)? {
            Binding::Mem(m) => Ok(m.clone()),
            _ => Err(format!("ill-formed kernel: `{name}` is not a pointer")),
        }
    }

    fn fresh(&mut self, c: Class) -> Reg {
        self.regs.fresh(c)
    }

    /// The register to write a result of class `c` into: `want` if it fits, else a new one.
    fn dst(&mut self, want: Option<Reg>, c: Class) -> Reg {
        match want {
            Some(r) if r.class == c => r,
            _ => self.fresh(c),
        }
    }

    /// `v` in a register of class `c` (immediates are moved into a new one).
    fn reg(&mut self, v: Val, c: Class) -> Reg {
        match v {
            Val::Reg(r) => r,
            Val::Imm(i) => {
                let r = self.fresh(c);
                let ty = match c {
                    Class::Pred => "pred",
                    Class::B16 => "b16",
                    Class::B32 => "b32",
                    Class::B64 => "b64",
                    Class::F32 => "f32",
                    Class::F64 => "f64",
                };
                self.ins(format_args!("mov.{ty} {r}, {i}"));
                r
            }
        }
    }

    /// A value that stays as it is now even if a `var` it reads is assigned later.
    fn snapshot(&mut self, v: Val) -> Val {
        match v {
            Val::Reg(r) if self.mutable.contains(&r) => {
                let c = self.fresh(r.class);
                self.mov(c, &Val::Reg(r));
                Val::Reg(c)
            }
            v => v,
        }
    }

    fn mov(&mut self, d: Reg, v: &Val) {
        let ty = match d.class {
            Class::Pred => "pred",
            Class::B16 => "b16",
            Class::B32 => "b32",
            Class::B64 => "b64",
            Class::F32 => "f32",
            Class::F64 => "f64",
        };
        self.ins(format_args!("mov.{ty} {d}, {v}"));
    }

    /// Evaluates `e` into `d` (moving only when the value landed elsewhere).
    fn expr_into(&mut self, e: &Expr, d: Reg) -> R<()> {
        let v = self.expr(e, Some(d))?;
        if v != Val::Reg(d) {
            self.mov(d, &v);
        }
        Ok(())
    }

    // ---- frame -------------------------------------------------------------------------

    fn sreg(&mut self, name: &str, dim: u8) -> Reg {
        let r = self.fresh(Class::B32);
        let d = ["x", "y", "z"][dim as usize];
        self.ins(format_args!("mov.u32 {r}, %{name}.{d}"));
        r
    }

    fn prologue(&mut self, scan: &Scan) -> R<()> {
        for &(kind, dim) in &scan.builtins {
            if dim > 2 {
                return Err(format!("ill-formed kernel: {}({dim})", kind.name()));
            }
            let r = match kind {
                Builtin::LocalId => self.sreg("tid", dim),
                Builtin::LocalSize => self.sreg("ntid", dim),
                Builtin::GroupId => self.sreg("ctaid", dim),
                Builtin::NumGroups => self.sreg("nctaid", dim),
                Builtin::GlobalSize => {
                    let (a, b) = (self.sreg("ntid", dim), self.sreg("nctaid", dim));
                    self.ins(format_args!("mul.lo.u32 {a}, {a}, {b}"));
                    a
                }
                Builtin::GlobalOffset => {
                    let r = self.fresh(Class::B32);
                    self.ins(format_args!("ld.param.u32 {r}, [{}]", OFFSET_PARAMS[dim as usize]));
                    r
                }
                Builtin::GlobalId => {
                    let c = self.sreg("ctaid", dim);
                    let n = self.sreg("ntid", dim);
                    let t = self.sreg("tid", dim);
                    let o = self.fresh(Class::B32);
                    self.ins(format_args!("ld.param.u32 {o}, [{}]", OFFSET_PARAMS[dim as usize]));
                    self.ins(format_args!("mad.lo.u32 {c}, {c}, {n}, {t}"));
                    self.ins(format_args!("add.u32 {c}, {c}, {o}"));
                    c
                }
            };
            self.builtins.insert((kind, dim), r);
        }
        if scan.locals.is_empty() {
            return Ok(());
        }
        // Local arrays start zeroed: the work-group clears them together, then synchronizes.
        let [tx, ty, tz] = [0, 1, 2].map(|d| self.sreg("tid", d));
        let [nx, ny, nz] = [0, 1, 2].map(|d| self.sreg("ntid", d));
        let lin = self.fresh(Class::B32);
        self.ins(format_args!("mad.lo.u32 {lin}, {ny}, {tz}, {ty}"));
        self.ins(format_args!("mad.lo.u32 {lin}, {lin}, {nx}, {tx}"));
        let size = self.fresh(Class::B32);
        self.ins(format_args!("mul.lo.u32 {size}, {nx}, {ny}"));
        self.ins(format_args!("mul.lo.u32 {size}, {size}, {nz}"));
        let k = self.kernel.name().to_string();
        // Past ptxas's static limit, the arrays are carved out of one `.extern` (dynamic)
        // window (declared by `lower_kernel`), 16-byte aligned each, that the launch sizes.
        let align = self.local_align;
        let total: u64 = scan.locals.iter().map(|(_, e, n)| local_window(*e, *n, align)).sum();
        let dynamic = total > super::MAX_SHARED_BYTES;
        let mut offset = 0u64;
        for (name, elem, count) in &scan.locals {
            let words = (elem.size_bytes() as u64 * *count as u64).div_ceil(4);
            let base = self.fresh(Class::B64);
            if dynamic {
                self.ins(format_args!("mov.u64 {base}, {k}_dynamic"));
                if offset > 0 {
                    self.ins(format_args!("add.u64 {base}, {base}, {offset}"));
                }
                offset += local_window(*elem, *count, align);
            } else {
                self.arrays += 1;
                let sym = format!("{k}_local{}", self.arrays);
                let _ = writeln!(self.decls, "\t.shared .align {align} .b8 {sym}[{}];", words * 4);
                self.ins(format_args!("mov.u64 {base}, {sym}"));
            }
            let i = self.fresh(Class::B32);
            self.ins(format_args!("mov.u32 {i}, {lin}"));
            let (top, end) = (self.label(), self.label());
            let p = self.fresh(Class::Pred);
            let a = self.fresh(Class::B64);
            self.place(&top);
            self.ins(format_args!("setp.ge.u32 {p}, {i}, {words}"));
            self.ins(format_args!("@{p} bra {end}"));
            self.ins(format_args!("mad.wide.u32 {a}, {i}, 4, {base}"));
            self.ins(format_args!("st.shared.u32 [{a}], 0"));
            self.ins(format_args!("add.u32 {i}, {i}, {size}"));
            self.ins(format_args!("bra {top}"));
            self.place(&end);
            self.locals.insert(name.clone(), Mem { space: ".shared", elem: *elem, base });
        }
        self.ins(format_args!("bar.sync 0"));
        Ok(())
    }

    // ---- statements --------------------------------------------------------------------

    fn block(&mut self, s: &Stmt) -> R<()> {
        self.scopes.push();
        let r = s.stmts().iter().try_for_each(|s| self.stmt(s));
        self.scopes.pop();
        r
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        if !stmt_in_memory_form(s) {
            return self.stmt_lanes(s);
        }
        self.stmt_direct(s)
    }

    /// A simple statement with lane-wise vector operations, lowered to the memory form first
    /// (see `super::prepare`); a vector `let` is then bound to its lanes' values.
    fn stmt_lanes(&mut self, s: &Stmt) -> R<()> {
        for t in self.vlanes.lower(s) {
            self.stmt_direct(&t)?;
        }
        if let StmtNode::Let { var, .. } = s.node() {
            if var.ty().is_vector() {
                let lanes: Vec<Expr> = self.vlanes.lanes_of(var.name()).unwrap_or(&[]).to_vec();
                let vals = lanes.iter().map(|e| self.expr(e, None)).collect::<R<Vec<_>>>()?;
                self.bind(var.name_arc(), Binding::Vector(vals));
            }
        }
        Ok(())
    }

    /// A statement in the memory form.
    fn stmt_direct(&mut self, s: &Stmt) -> R<()> {
        match s.node() {
            StmtNode::Let { var, value } if var.ty().is_vector() => {
                let lanes = self.vexpr(value)?;
                let lanes = lanes.into_iter().map(|v| self.snapshot(v)).collect();
                self.vlanes.bound_by_target(var.name());
                self.bind(var.name_arc(), Binding::Vector(lanes));
            }
            StmtNode::VecStore { buf, index, value } => self.vstore(buf, index, value)?,
            StmtNode::Let { var, value } if var.ty().frag().is_some() => {
                self.frag_bind(var, value, false)?
            }
            StmtNode::Decl { var, init } if var.ty().frag().is_some() => {
                self.frag_bind(var, init, true)?
            }
            StmtNode::Assign { var, value } if var.ty().frag().is_some() => {
                self.frag_assign(var, value)?
            }
            StmtNode::Let { var, value } => {
                let v = match self.split_offset(value)? {
                    Some((x, off)) => {
                        let t = scalar(value.ty())?;
                        let r = self.fresh(Class::of(t));
                        self.ins(format_args!("add.s{} {r}, {x}, {off}", t.bits()));
                        self.offsets.insert(r, (x, off));
                        Val::Reg(r)
                    }
                    None => self.expr(value, None)?,
                };
                let v = self.snapshot(v);
                self.bind(var.name_arc(), Binding::Val(v));
            }
            StmtNode::Decl { var, init } => {
                let t = scalar(var.ty())?;
                let r = self.fresh(Class::of(t));
                self.expr_into(init, r)?;
                self.mutable.insert(r);
                self.bind(var.name_arc(), Binding::Var(r));
            }
            StmtNode::Assign { var, value } => {
                let r = match self.lookup(var.name())? {
                    Binding::Var(r) => *r,
                    _ => return Err(format!("ill-formed kernel: `{}` is not a var", var.name())),
                };
                self.expr_into(value, r)?;
            }
            StmtNode::Store { buf, index, value } => {
                let m = self.mem(buf.name())?;
                if m.elem == Scalar::Bool {
                    return Err("bool elements in memory".into());
                }
                let addr = self.addr(&m, index)?;
                let v = self.expr(value, None)?;
                self.ins(format_args!("st{}.{} {addr}, {v}", m.space, st_ty(m.elem)));
            }
            StmtNode::Alloc { var, count } => match var.ty() {
                Type::Ptr(AddrSpace::Local, _) => {
                    let m = self.locals.get(var.name()).cloned().ok_or_else(|| {
                        format!("local array `{}` not in the kernel's top-level block", var.name())
                    })?;
                    self.bind(var.name_arc(), Binding::Mem(m));
                }
                Type::Ptr(AddrSpace::Private, elem) => {
                    let m = self.private_array(elem, *count);
                    self.bind(var.name_arc(), Binding::Mem(m));
                }
                t => return Err(format!("array `{}` of type {t}", var.name())),
            },
            StmtNode::If { cond, then, otherwise } => {
                let c = self.expr(cond, None)?;
                let c = self.reg(c, Class::Pred);
                let skip = self.label();
                self.ins(format_args!("@!{c} bra {skip}"));
                self.block(then)?;
                match otherwise {
                    None => self.place(&skip),
                    Some(o) => {
                        let end = self.label();
                        self.ins(format_args!("bra {end}"));
                        self.place(&skip);
                        self.block(o)?;
                        self.place(&end);
                    }
                }
            }
            StmtNode::While { cond, body } => {
                let (top, end) = (self.label(), self.label());
                self.place(&top);
                let c = self.expr(cond, None)?;
                let c = self.reg(c, Class::Pred);
                self.ins(format_args!("@!{c} bra {end}"));
                self.block(body)?;
                self.ins(format_args!("bra {top}"));
                self.place(&end);
            }
            StmtNode::For { var, lo, hi, step, body } => self.for_loop(var, lo, hi, step, body)?,
            StmtNode::Block(_) => self.block(s)?,
            StmtNode::Call { result, func, args } => match func.kind() {
                FuncKind::Barrier(_) => self.ins(format_args!("bar.sync 0")),
                FuncKind::Fence(f) => {
                    let op = if f.global { "membar.gl" } else { "membar.cta" };
                    self.ins(format_args!("{op}"));
                }
                FuncKind::Atomic(op) => {
                    let r = self.atomic(op, args)?;
                    if let Some(v) = result {
                        self.bind(v.name_arc(), Binding::Val(Val::Reg(r)));
                    }
                }
                FuncKind::Matrix(op) => self.matrix(op, result.as_ref(), args)?,
            },
        }
        Ok(())
    }

    fn private_array(&mut self, elem: Scalar, count: u32) -> Mem {
        let words = (elem.size_bytes() as u64 * count as u64).div_ceil(4);
        self.arrays += 1;
        let sym = format!("{}_private{}", self.kernel.name(), self.arrays);
        let _ = writeln!(self.decls, "\t.local .align 16 .b8 {sym}[{}];", words * 4);
        let base = self.fresh(Class::B64);
        self.ins(format_args!("mov.u64 {base}, {sym}"));
        if words <= 16 {
            for w in 0..words {
                let off = if w == 0 { String::new() } else { format!("+{}", w * 4) };
                self.ins(format_args!("st.local.u32 [{base}{off}], 0"));
            }
        } else {
            let i = self.fresh(Class::B64);
            let e = self.fresh(Class::B64);
            let p = self.fresh(Class::Pred);
            let top = self.label();
            self.ins(format_args!("mov.u64 {i}, {base}"));
            self.ins(format_args!("add.s64 {e}, {base}, {}", words * 4));
            self.place(&top);
            self.ins(format_args!("st.local.u32 [{i}], 0"));
            self.ins(format_args!("add.s64 {i}, {i}, 4"));
            self.ins(format_args!("setp.lt.u64 {p}, {i}, {e}"));
            self.ins(format_args!("@{p} bra {top}"));
        }
        Mem { space: ".local", elem, base }
    }

    fn for_loop(
        &mut self,
        var: &kiln_ir::Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &Stmt,
    ) -> R<()> {
        let t = scalar(var.ty())?;
        if !t.is_int() {
            return Err(format!("loop counter `{}` of type {t}", var.name()));
        }
        let c = Class::of(t);
        let ty = arith_ty(t);
        let uty = if c == Class::B64 { "u64" } else { "u32" };
        let v = self.fresh(c);
        self.expr_into(lo, v)?;
        let h = self.expr(hi, None)?;
        let h = self.snapshot(h);
        let s = self.expr(step, None)?;
        let s = self.snapshot(s);
        let (top, end) = (self.label(), self.label());
        let p = self.fresh(Class::Pred);
        self.ins(format_args!("setp.ge.{ty} {p}, {v}, {h}"));
        self.ins(format_args!("@{p} bra {end}"));
        self.place(&top);
        self.scopes.push();
        self.bind(var.name_arc(), Binding::Val(Val::Reg(v)));
        let r = self.block(body);
        self.scopes.pop();
        r?;
        let p = self.fresh(Class::Pred);
        if s == imm_val(1) {
            // v < hi <= MAX, so v + 1 cannot wrap.
            self.ins(format_args!("add.{ty} {v}, {v}, 1"));
            self.ins(format_args!("setp.lt.{ty} {p}, {v}, {h}"));
            self.ins(format_args!("@{p} bra {top}"));
        } else {
            // Stop unless v + step < hi, computed without overflow: hi - v > step.
            let d = self.fresh(c);
            self.ins(format_args!("sub.{uty} {d}, {h}, {v}"));
            self.ins(format_args!("setp.le.{uty} {p}, {d}, {s}"));
            self.ins(format_args!("@{p} bra {end}"));
            self.ins(format_args!("add.{ty} {v}, {v}, {s}"));
            self.ins(format_args!("bra {top}"));
        }
        self.place(&end);
        Ok(())
    }

    fn atomic(&mut self, op: AtomicOp, args: &[Expr]) -> R<Reg> {
        let buf = args
            .first()
            .and_then(|a| a.as_var())
            .ok_or("ill-formed kernel: atomic without a pointer variable")?;
        let m = self.mem(buf.name())?;
        let want = 2 + op.value_operands();
        if args.len() != want {
            return Err(format!("ill-formed kernel: `{}` takes {want} operands", op.name()));
        }
        let t = m.elem;
        let c = Class::of(t);
        let space = match m.space {
            ".local" => return Err("atomics on private memory".into()),
            s => s,
        };
        let addr = self.addr(&m, &args[1])?;
        let v = self.expr(&args[want - 1], None)?;
        let v = self.reg(v, c);
        let d = self.fresh(c);
        let wide = c == Class::B64;
        let b = if wide { "b64" } else { "b32" };
        let u = if wide { "u64" } else { "u32" };
        match (op, t) {
            (AtomicOp::Add, Scalar::F32) => {
                self.ins(format_args!("atom{space}.add.f32 {d}, {addr}, {v}"))
            }
            (
                AtomicOp::Add | AtomicOp::Sub,
                Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64,
            ) => {
                let v = if op == AtomicOp::Sub {
                    let n = self.fresh(c);
                    self.ins(format_args!("neg.s{} {n}, {v}", if wide { 64 } else { 32 }));
                    n
                } else {
                    v
                };
                self.ins(format_args!("atom{space}.add.{u} {d}, {addr}, {v}"))
            }
            (
                AtomicOp::Min | AtomicOp::Max,
                Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64,
            ) => {
                let o = if op == AtomicOp::Min { "min" } else { "max" };
                self.ins(format_args!("atom{space}.{o}.{} {d}, {addr}, {v}", arith_ty(t)))
            }
            (
                AtomicOp::And | AtomicOp::Or | AtomicOp::Xor,
                Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64,
            ) => {
                let o = match op {
                    AtomicOp::And => "and",
                    AtomicOp::Or => "or",
                    _ => "xor",
                };
                self.ins(format_args!("atom{space}.{o}.{b} {d}, {addr}, {v}"))
            }
            (AtomicOp::Xchg, Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64) => {
                self.ins(format_args!("atom{space}.exch.{b} {d}, {addr}, {v}"))
            }
            (AtomicOp::CmpXchg, Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64) => {
                let cmp = self.expr(&args[2], None)?;
                let cmp = self.reg(cmp, c);
                self.ins(format_args!("atom{space}.cas.{b} {d}, {addr}, {cmp}, {v}"))
            }
            _ => return Err(format!("`{}` on {t} elements", op.name())),
        }
        Ok(d)
    }

    /// The address operand of `m[index]`: one `mad.wide` (none for a constant index).
    fn addr(&mut self, m: &Mem, index: &Expr) -> R<Addr> {
        let size = m.elem.size_bytes() as i128;
        let it = scalar(index.ty())?;
        if !it.is_int() {
            return Err(format!("index of type {it}"));
        }
        let base = m.base;
        if let Some(i) = index.as_imm().and_then(Imm::as_i128) {
            let off = i * size;
            if (i32::MIN as i128..=i32::MAX as i128).contains(&off) {
                return Ok(Addr::new(base, off as i64));
            }
        }
        let (i, off) = match self.split_offset(index)? {
            Some((x, c)) if (c * size) <= i32::MAX as i128 => (x, c * size),
            _ => (self.expr(index, None)?, 0),
        };
        let a = self.addr_reg(base, it, size, i);
        Ok(Addr::new(a, off as i64))
    }

    /// `index` as `x + C` with `C > 0` when its type is a signed integer: a `+` or `add3`
    /// with a positive constant, or a `let` bound to one, nested. Folding `C` into the
    /// address is exact for every in-bounds access: `x + C` wraps only past the type's
    /// maximum, to a negative index, which no access may use. (Unsigned indices wrap to
    /// small ones, and negative constants to large ones, so neither is folded.)
    /// `None` when there is no constant to split off.
    fn split_offset(&mut self, index: &Expr) -> R<Option<(Val, i128)>> {
        let Some(t) = index.ty().scalar().filter(|t| t.is_int() && t.is_signed()) else {
            return Ok(None);
        };
        if t.bits() < 32 {
            return Ok(None);
        }
        let positive = |e: &Expr| e.as_imm().and_then(Imm::as_i128).filter(|c| *c > 0);
        let (x, c) = match index.node() {
            ExprNode::Binary { op: BinOp::Add, a, b } => match (positive(a), positive(b)) {
                (_, Some(c)) => (a.clone(), c),
                (Some(c), _) => (b.clone(), c),
                _ => return Ok(None),
            },
            ExprNode::Intrinsic { op: Intrinsic::Add3, args } => {
                let Some(k) = args.iter().position(|e| positive(e).is_some()) else {
                    return Ok(None);
                };
                let rest: Vec<&Expr> =
                    args.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, e)| e).collect();
                let x = Expr::binary(BinOp::Add, rest[0].clone(), rest[1].clone());
                (x, positive(&args[k]).expect("positive"))
            }
            ExprNode::Var(v) => {
                return Ok(match self.lookup(v.name())? {
                    Binding::Val(Val::Reg(r)) => self.offsets.get(r).cloned(),
                    _ => None,
                })
            }
            _ => return Ok(None),
        };
        let (x, c0) = match self.split_offset(&x)? {
            Some((x, c0)) => (x, c0),
            None => (self.expr(&x, None)?, 0),
        };
        let total = c + c0;
        if total > t.int_max().unwrap_or(0) || matches!(&x, Val::Reg(r) if self.mutable.contains(r))
        {
            return Ok(None);
        }
        Ok(Some((x, total)))
    }

    /// The register holding `base + i * size` (`i` of index type `it`), reused within a
    /// straight-line stretch.
    fn addr_reg(&mut self, base: Reg, it: Scalar, size: i128, i: Val) -> Reg {
        let key = match &i {
            Val::Reg(r) if self.mutable.contains(r) => None,
            v => Some((base, v.clone())),
        };
        if let Some(a) = key.as_ref().and_then(|k| self.addrs.get(k)) {
            return *a;
        }
        let a = self.fresh(Class::B64);
        if let Some(k) = key {
            self.addrs.insert(k, a);
        }
        match Class::of(it) {
            Class::B64 => {
                let i = self.reg(i, Class::B64);
                self.ins(format_args!("mad.lo.s64 {a}, {i}, {size}, {base}"));
            }
            _ => {
                let i = self.reg(i, Class::B32);
                let w = if it.is_signed() { "s32" } else { "u32" };
                self.ins(format_args!("mad.wide.{w} {a}, {i}, {size}, {base}"));
            }
        }
        a
    }
}

fn scalar(t: Type) -> R<Scalar> {
    t.scalar().ok_or_else(|| format!("a pointer of type {t} used as a value"))
}

/// The `st` type of an element (bit types; the low bits of a wider register are stored).
fn st_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::I8 | Scalar::U8 => "b8",
        Scalar::I16 | Scalar::U16 | Scalar::F16 | Scalar::BF16 => "b16",
        other => mem_ty(other),
    }
}

/// The `selp` type of a value.
fn sel_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::F32 => "f32",
        Scalar::F64 => "f64",
        Scalar::F16 | Scalar::BF16 => "b16",
        s => bits_ty(s),
    }
}

/// Bytes one local array of `count` `elem`s takes in the dynamic shared window: whole words,
/// rounded up to `align` (16, or 1024 for warpgroup kernels: `local_align`) so that the next
/// array keeps `ldmatrix`'s and `cp.async`'s alignment, or the swizzle's.
pub(super) fn local_window(elem: Scalar, count: u32, align: u64) -> u64 {
    ((elem.size_bytes() as u64 * count as u64).div_ceil(4) * 4).next_multiple_of(align)
}

/// The alignment of `kernel`'s local arrays: 1024 bytes (the 128-byte swizzle's repeat) if
/// it uses warpgroup operations, which address local memory through a swizzle of the
/// absolute address, else 16.
fn local_align(kernel: &Kernel) -> u64 {
    local_align_of(kiln_ir::matrix::first_warpgroup(kernel))
}

/// [`local_align`] from the kernel's first warpgroup operation, already found.
pub(super) fn local_align_of(warpgroup: Option<kiln_ir::matrix::Extension>) -> u64 {
    if warpgroup.is_some() {
        1024
    } else {
        16
    }
}

/// Bytes of dynamic shared memory `kernel` needs at launch: 0 when its local arrays fit
/// ptxas's static limit ([`super::MAX_SHARED_BYTES`]), else the whole window they share.
pub fn dynamic_shared_bytes(kernel: &Kernel) -> u64 {
    dynamic_shared_bytes_at(kernel, local_align(kernel))
}

/// [`dynamic_shared_bytes`] with the kernel's [`local_align`] already known.
pub(super) fn dynamic_shared_bytes_at(kernel: &Kernel, align: u64) -> u64 {
    let mut scan = Scan { locals_only: true, ..Scan::default() };
    scan.visit_stmt(kernel.body());
    let total: u64 = scan.locals.iter().map(|(_, e, n)| local_window(*e, *n, align)).sum();
    if total > super::MAX_SHARED_BYTES {
        total
    } else {
        0
    }
}
