//! Shared helpers for the fusion tests: running a fused kernel against the sequential
//! originals, and random kernel lists with compatible nd-ranges.
#![allow(dead_code)]

pub mod epilogue;

use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{default_local_size, Arg, Buffer, NdRange};
use kiln_ir::testing::{case_from_choices, results_match, Choices, GenConfig, TestCase};
use kiln_ir::{
    AddrSpace, Attrs, Builtin, Expr, ExprNode, Imm, Kernel, Module, Mutator, Stmt, StmtNode,
};
use kiln_passes::fusion::{
    fuse_kernels, ArgMap, ConstValue, Constant, FusedKernel, FusionError, FusionSpec, ParamRef,
    PromoteTo, Promotion, RangeSpec, RemapMode,
};

/// One list entry: its kernel name, the range it is launched with unfused, its arguments
/// (buffers index the shared pool).
#[derive(Clone, Debug)]
pub struct Entry {
    pub kernel: String,
    pub range: NdRange,
    pub args: Vec<Arg>,
}

/// A fusion scenario: module, spec, entries and the buffer pool.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub module: Module,
    pub spec: FusionSpec,
    pub entries: Vec<Entry>,
    pub pool: Vec<Buffer>,
}

pub const STEPS: u64 = 10_000_000;

/// Runs the entries one after another on a copy of the pool.
pub fn run_sequential(s: &Scenario) -> Result<Vec<Buffer>, String> {
    let mut pool = s.pool.clone();
    for e in &s.entries {
        let k = s.module.kernel(&e.kernel).ok_or("no kernel")?;
        run_with(k, &e.range, &e.args, &mut pool, &RunOptions::with_max_steps(STEPS))
            .map_err(|e| e.to_string())?;
    }
    Ok(pool)
}

/// The fused kernel's arguments, bound by the library from the entries' arguments.
pub fn fused_args(s: &Scenario, f: &FusedKernel) -> Vec<Arg> {
    let args: Vec<Vec<Arg>> = s.entries.iter().map(|e| e.args.clone()).collect();
    f.bind_args(&s.module, &s.spec, &args).unwrap_or_else(|e| panic!("binding arguments: {e}"))
}

/// Pool indices of buffers that were internalized.
pub fn promoted_buffers(s: &Scenario, f: &FusedKernel) -> Vec<usize> {
    let mut v = Vec::new();
    for (e, maps) in f.args.iter().enumerate() {
        for (p, m) in maps.iter().enumerate() {
            if let (ArgMap::Promoted { .. }, Arg::Buffer(b)) = (m, &s.entries[e].args[p]) {
                v.push(*b);
            }
        }
    }
    v
}

/// Runs the fused kernel once on a copy of the pool.
pub fn run_fused(s: &Scenario, f: &FusedKernel) -> Result<Vec<Buffer>, String> {
    let mut pool = s.pool.clone();
    run_with(&f.kernel, &f.range, &fused_args(s, f), &mut pool, &RunOptions::with_max_steps(STEPS))
        .map_err(|e| format!("{e}\n{}", f.kernel))?;
    Ok(pool)
}

/// Fuses and checks: fused == sequential, internalized buffers untouched.
pub fn check(s: &Scenario) -> Result<FusedKernel, String> {
    let f = fuse_kernels(&s.module, &s.spec).map_err(|e| format!("fusion failed: {e}"))?;
    let seq = run_sequential(s)?;
    let fused = run_fused(s, &f)?;
    let promoted = promoted_buffers(s, &f);
    let mut expected = seq.clone();
    for &b in &promoted {
        expected[b] = s.pool[b].clone();
    }
    results_match(&expected, &fused).map_err(|m| format!("{m}\nfused kernel:\n{}", f.kernel))?;
    // The fused kernel prints and parses back to itself.
    let text = f.kernel.to_string();
    let m = kiln_ir::parse_module(&text).map_err(|e| format!("{e:?}\n{text}"))?;
    if !m.kernels[0].is_equal(&f.kernel) {
        return Err(format!("round trip changed the kernel:\n{text}"));
    }
    Ok(f)
}

/// Fuses and expects an error.
pub fn fuse_err(s: &Scenario) -> FusionError {
    match fuse_kernels(&s.module, &s.spec) {
        Ok(f) => panic!("expected an error, fused:\n{}", f.kernel),
        Err(e) => e,
    }
}

// ---- random lists ------------------------------------------------------------------------

/// Replaces local built-ins by their values for work-groups of one work-item, so the kernel's
/// results do not depend on the local size.
struct Agnostic;
impl Mutator for Agnostic {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Builtin { kind, dim } = e.node() {
            return match kind {
                Builtin::LocalSize => Expr::u32(1),
                Builtin::LocalId => Expr::u32(0),
                Builtin::GroupId => {
                    Expr::global_id(*dim) - Expr::builtin(Builtin::GlobalOffset, *dim)
                }
                Builtin::NumGroups => Expr::builtin(Builtin::GlobalSize, *dim),
                _ => e.clone(),
            };
        }
        kiln_ir::walk_mutate_expr(self, e)
    }
}

fn lin3() -> Expr {
    let rel = |d: u8| Expr::global_id(d) - Expr::builtin(Builtin::GlobalOffset, d);
    rel(0)
        + Expr::builtin(Builtin::GlobalSize, 0)
            * (rel(1) + Expr::builtin(Builtin::GlobalSize, 1) * rel(2))
}

fn llin3() -> Expr {
    Expr::local_id(0)
        + Expr::builtin(Builtin::LocalSize, 0)
            * (Expr::local_id(1) + Expr::builtin(Builtin::LocalSize, 1) * Expr::local_id(2))
}

fn group_size(r: &NdRange) -> u32 {
    r.local.unwrap_or_else(|| default_local_size(r.global)).iter().product()
}

/// Moves a generated case to another nd-range: 3-D linear ids, output buffers and local
/// arrays resized, `#reqd_work_group_size` following the local size.
pub fn retarget(case: &TestCase, range: &NdRange, agnostic: bool) -> TestCase {
    let old_n = case.range.work_items() as usize;
    let new_n = range.work_items() as usize;
    let old_g = group_size(&case.range);
    let new_g = group_size(range);
    let stmts: Vec<Stmt> = case
        .kernel
        .body()
        .stmts()
        .iter()
        .map(|s| match s.node() {
            StmtNode::Let { var, .. } if var.name() == "lin" => Stmt::let_(var, lin3()),
            StmtNode::Let { var, .. } if var.name() == "llin" => Stmt::let_(var, llin3()),
            StmtNode::Alloc { var, count } if var.ty().addr_space() == Some(AddrSpace::Local) => {
                Stmt::alloc(var, (*count).max(count / old_g * new_g))
            }
            _ => s.clone(),
        })
        .collect();
    let attrs = Attrs {
        reqd_work_group_size: case.kernel.attrs().reqd_work_group_size.and(range.local),
        fast_math: case.kernel.attrs().fast_math,
        ..Attrs::default()
    };
    let mut kernel = Kernel::with_attrs(
        case.kernel.name(),
        case.kernel.params().to_vec(),
        attrs,
        Stmt::block(stmts),
    );
    if agnostic {
        kernel = Agnostic.mutate_kernel(&kernel);
    }
    let mut buffers = case.buffers.clone();
    for (p, a) in case.kernel.params().iter().zip(&case.args) {
        if let Arg::Buffer(b) = a {
            if p.name().starts_with("out") {
                let k = buffers[*b].len() / old_n;
                let old = buffers[*b].to_imms();
                let new: Vec<Imm> = (0..new_n * k).map(|i| old[i % old.len()]).collect();
                buffers[*b] = Buffer::from_imms(buffers[*b].elem(), &new).expect("same type");
            }
        }
    }
    TestCase { kernel, range: *range, args: case.args.clone(), buffers }
}

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// Which family of nd-range combinations a random list uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every entry has the same range.
    Same,
    /// Ranges differ only in the slowest dimension (no id remapping; guards).
    Slowest,
    /// Dims or faster dimensions differ (id remapping, no local size, zero offset).
    Remap,
}

/// A random list of random kernels with random compatible nd-ranges.
pub fn random_scenario(raw: &[u32]) -> Scenario {
    let mut c = Choices::new(raw);
    let mode = [Mode::Same, Mode::Slowest, Mode::Remap][c.below(3)];
    let n = 1 + c.below(4);
    let ncases = 1 + c.below(n);
    let explicit_local = mode != Mode::Remap && c.chance(60);
    let agnostic = !explicit_local && mode != Mode::Same;
    let cfg = GenConfig {
        max_work_items: 32,
        max_stmts: 5,
        local_arrays: !agnostic,
        barriers: !agnostic,
        ..GenConfig::default()
    };
    // Ranges.
    let dims = 1 + c.below(3);
    let mut base = [1u32; 3];
    let mut local = [1u32; 3];
    for d in 0..dims {
        base[d] = [1, 2, 3, 4, 6, 8][c.below(6)];
        let ds = divisors(base[d]);
        local[d] = ds[c.below(ds.len())];
    }
    let offset: [u32; 3] = if mode != Mode::Remap && c.chance(40) {
        [c.below(4) as u32, c.below(3) as u32, c.below(3) as u32]
    } else {
        [0; 3]
    };
    let mut ranges: Vec<NdRange> = Vec::new();
    for _ in 0..n {
        let r = match mode {
            Mode::Same => {
                let mut r = NdRange::new(&base[..dims]).with_offset(&offset[..dims]);
                if explicit_local {
                    r = r.with_local(&local[..dims]);
                }
                r
            }
            Mode::Slowest => {
                let mut g = base;
                let s = dims - 1;
                g[s] = local[s] * (1 + c.below(3) as u32);
                let mut r = NdRange::new(&g[..dims]).with_offset(&offset[..dims]);
                if explicit_local {
                    r = r.with_local(&local[..dims]);
                }
                r
            }
            Mode::Remap => {
                let d = 1 + c.below(3);
                let g: Vec<u32> = (0..d).map(|_| [1, 2, 3, 4, 5, 8][c.below(6)]).collect();
                NdRange::new(&g)
            }
        };
        ranges.push(r);
    }
    // Kernels: case templates, retargeted per entry.
    let templates: Vec<TestCase> = (0..ncases)
        .map(|i| {
            let len = 1 + c.below(800);
            let choices: Vec<u32> = (0..len).map(|_| c.next_u32()).collect();
            let mut t = case_from_choices(&choices, &cfg);
            t.kernel = Kernel::with_attrs(
                format!("k{i}"),
                t.kernel.params().to_vec(),
                t.kernel.attrs().clone(),
                t.kernel.body().clone(),
            );
            t
        })
        .collect();
    let picks: Vec<usize> = (0..n).map(|i| if i < ncases { i } else { c.below(ncases) }).collect();
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut pool: Vec<Buffer> = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut spec = FusionSpec { name: "fused".into(), ..FusionSpec::default() };
    if mode == Mode::Remap && c.chance(30) {
        spec.remap = RemapMode::Ptx;
    }
    if c.chance(15) {
        spec.barriers = kiln_passes::fusion::BarrierPolicy::None;
    }
    // Per template: the first entry using it, to share buffers with.
    let mut first_use: Vec<Option<usize>> = vec![None; ncases];
    let share_all = mode == Mode::Same && c.chance(50);
    for (e, &t) in picks.iter().enumerate() {
        let case = retarget(&templates[t], &ranges[e], agnostic);
        let kname = format!("k{t}_{}", if mode == Mode::Same { 0 } else { e });
        let kernel = Kernel::with_attrs(
            kname.clone(),
            case.kernel.params().to_vec(),
            case.kernel.attrs().clone(),
            case.kernel.body().clone(),
        );
        if !kernels.iter().any(|k| k.name() == kname) {
            kernels.push(kernel.clone());
        }
        let mut args = Vec::new();
        for (p, (v, a)) in kernel.params().iter().zip(&case.args).enumerate() {
            match a {
                Arg::Buffer(b) => {
                    let is_input = v.name().starts_with("in") || v.name().starts_with("alias");
                    match first_use[t] {
                        Some(f) if (is_input || share_all) && c.chance(70) => {
                            let Arg::Buffer(fb) = entries[f].args[p] else { unreachable!() };
                            spec.identical.push(vec![ParamRef::new(f, p), ParamRef::new(e, p)]);
                            args.push(Arg::Buffer(fb));
                        }
                        _ => {
                            // Same-case aliases inside one entry: keep the binding shape.
                            let existing = case.args[..p].iter().position(|x| x == a);
                            if let Some(q) = existing {
                                args.push(args[q].clone());
                            } else {
                                pool.push(case.buffers[*b].clone());
                                args.push(Arg::Buffer(pool.len() - 1));
                            }
                        }
                    }
                }
                Arg::Range { .. } => unreachable!("generated cases bind whole buffers"),
                Arg::Scalar(imm) => {
                    if c.chance(40) {
                        let value = match *imm {
                            Imm::Bool(b) => ConstValue::Bool(b),
                            Imm::Int(..) => ConstValue::Int(imm.as_i128().unwrap_or(0)),
                            Imm::Float(_, f) => ConstValue::Float(f),
                        };
                        spec.constants.push(Constant { param: ParamRef::new(e, p), value });
                    }
                    args.push(a.clone());
                }
            }
        }
        if first_use[t].is_none() {
            first_use[t] = Some(e);
        }
        // Promotion of an output buffer (zeroed: it is a temporary).
        if mode == Mode::Same && c.chance(40) {
            let outs: Vec<usize> = kernel
                .params()
                .iter()
                .enumerate()
                .filter(|(_, v)| v.name().starts_with("out"))
                .map(|(p, _)| p)
                .collect();
            if !outs.is_empty() {
                let p = outs[c.below(outs.len())];
                if let Arg::Buffer(b) = args[p] {
                    let to = if dims == 1 && explicit_local && c.chance(50) {
                        PromoteTo::Local
                    } else {
                        PromoteTo::Private
                    };
                    pool[b] = Buffer::zeroed(pool[b].elem(), pool[b].len());
                    spec.promote.push(Promotion {
                        param: ParamRef::new(e, p),
                        to,
                        size: None,
                        buffer_len: Some(pool[b].len() as u32),
                    });
                }
            }
        }
        let mut rs = RangeSpec::new(&ranges[e].global[..ranges[e].dims]);
        // Unspecified local sizes and offsets are compatible with anything; keep at least
        // the first entry's.
        if let Some(l) = ranges[e].local {
            if e == 0 || c.chance(70) {
                rs = rs.with_local(&l[..ranges[e].dims]);
            }
        }
        if e == 0 || offset != [0; 3] && c.chance(70) || mode == Mode::Remap && c.chance(50) {
            rs = rs.with_offset(&ranges[e].offset[..ranges[e].dims]);
        }
        spec.kernels.push(kname);
        spec.ndranges.push(rs);
        entries.push(Entry { kernel: kernel.name().to_string(), range: ranges[e], args });
    }
    // Promoted temporaries: zero their shared copies too (identical groups).
    Scenario { module: Module::new(kernels), spec, entries, pool }
}
