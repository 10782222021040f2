//! Differential tests: the wave64 simulator running the AMDGPU backend's code must reproduce
//! the reference interpreter's buffers.

use kiln_backends::amdgpu::{compile, compile_with, sim, Error};
use kiln_ir::interp::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig, TestCase};
use std::collections::HashSet;

use kiln_ir::{parse_module, Kernel};
use kiln_passes::divergence::analyze_with;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn simulate(c: &kiln_backends::amdgpu::Compiled, case: &TestCase) -> Result<Vec<Buffer>, String> {
    let mut bufs = case.buffers.clone();
    sim::run(c, &case.kernel, &case.range, &case.args, &mut bufs)?;
    Ok(bufs)
}

/// Compiles and simulates; compares with the interpreter. Ok(false) if rejected.
fn differential(case: &TestCase) -> Result<bool, String> {
    let c = match compile(&case.kernel) {
        Ok(c) => c,
        Err(Error::Unsupported(_)) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let want = case.run().map_err(|e| e.to_string())?;
    let got = simulate(&c, case).map_err(|e| format!("{e}\n{}\n{}", case.kernel, c.asm))?;
    results_match(&want, &got).map_err(|e| format!("{e}\n{}\n{}", case.kernel, c.asm))?;
    Ok(true)
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}")).kernels.remove(0)
}

/// A small generator of kernels inside the backend's subset: u32/i32/f32 values, uniform
/// and divergent `if`/`else`, `for` and `while` loops with uniform or divergent trip counts,
/// local memory with barriers across two waves, several work-groups. Every work-item writes
/// only its own output slots, so kernels are race-free; indices are masked in bounds.
struct Gen {
    state: u64,
    vars: Vec<(String, &'static str)>,
    depth: usize,
    next: usize,
}

const LEN: u32 = 64;
const NVARS: usize = 4;

impl Gen {
    fn r(&mut self, n: u32) -> u32 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % n as u64) as u32
    }
    fn leaf(&mut self) -> String {
        match self.r(9) {
            0 => "lid".into(),
            1 => "gid".into(),
            2 => "group_id(0)".into(),
            3 => "n".into(),
            4 => format!("{}", self.r(100)),
            5 => format!("inp[{} & {}]", self.leaf(), LEN - 1),
            6 => format!("(fin[{} & {}] * x) as u32", self.leaf(), LEN - 1),
            _ => {
                let u: Vec<_> = self.vars.iter().filter(|v| v.1 == "u32").cloned().collect();
                if u.is_empty() {
                    "lid".into()
                } else {
                    u[self.r(u.len() as u32) as usize].0.clone()
                }
            }
        }
    }
    fn expr(&mut self, d: u32) -> String {
        if d == 0 || self.r(3) == 0 {
            return self.leaf();
        }
        let (a, b) = (self.expr(d - 1), self.expr(d - 1));
        match self.r(12) {
            0 => format!("({a} + {b})"),
            1 => format!("({a} - {b})"),
            2 => format!("({a} * {b})"),
            3 => format!("({a} & {b})"),
            4 => format!("({a} | {b})"),
            5 => format!("({a} ^ {b})"),
            6 => format!("({a} << {b})"),
            7 => format!("({a} >> {b})"),
            8 => format!("(({a} as i32 >> {b} as i32) as u32)"),
            9 => format!("min({a}, {b})"),
            10 => format!("({a} < {b} ? {a} : {b} + 1)"),
            _ => format!("(({a} as f32 * 0.5 + {b} as f32) as u32)"),
        }
    }
    fn cond(&mut self) -> String {
        let (a, b) = (self.expr(1), self.expr(1));
        let op = ["<", "<=", "==", "!=", ">", ">="][self.r(6) as usize];
        if self.r(2) == 0 {
            format!("{a} {op} {b}")
        } else {
            format!("({a} as i32) {op} ({b} as i32)")
        }
    }
    fn stmts(&mut self, n: u32, out: &mut String) {
        for _ in 0..n {
            self.stmt(out);
        }
    }
    fn stmt(&mut self, out: &mut String) {
        let k = if self.depth >= 2 { 0 } else { self.r(5) };
        self.depth += 1;
        match k {
            1 => {
                out.push_str(&format!("if {} {{\n", self.cond()));
                let m = self.r(3) + 1;
                self.stmts(m, out);
                if self.r(2) == 0 {
                    out.push_str("} else {\n");
                    let m = self.r(2) + 1;
                    self.stmts(m, out);
                }
                out.push_str("}\n");
            }
            2 => {
                let j = format!("j{}", self.next);
                self.next += 1;
                let (lo, hi) = (self.expr(1), self.expr(1));
                out.push_str(&format!(
                    "for {j}: u32 in ({lo}) & 3 .. ({hi}) & 7 step {} {{\n",
                    self.r(2) + 1
                ));
                self.vars.push((j, "u32"));
                let m = self.r(2) + 1;
                self.stmts(m, out);
                self.vars.pop();
                out.push_str("}\n");
            }
            3 => {
                let c = format!("c{}", self.next);
                self.next += 1;
                let b = self.expr(1);
                out.push_str(&format!(
                    "var {c}: u32 = 0;\nwhile {c} < ({b}) % 4 {{\n{c} = {c} + 1;\n"
                ));
                let m = self.r(2) + 1;
                self.stmts(m, out);
                out.push_str("}\n");
            }
            _ => {
                let i = self.r(NVARS as u32) as usize;
                let e = self.expr(2);
                if i == NVARS - 1 {
                    out.push_str(&format!("f = f * 0.75 + {e} as f32;\n"));
                } else {
                    out.push_str(&format!("v{i} = {e};\n"));
                }
            }
        }
        self.depth -= 1;
    }
}

fn gen_case(seed: u64) -> TestCase {
    let mut g = Gen { state: seed | 1, vars: vec![], depth: 0, next: 0 };
    let local = [32, 64, 128][g.r(3) as usize];
    let groups = g.r(3) + 1;
    let use_lds = g.r(2) == 0;
    let mut body = String::from(
        "let lid: u32 = local_id(0);\nlet gid: u32 = global_id(0) - global_offset(0);\n",
    );
    if use_lds {
        body.insert_str(0, &format!("local t: u32[{local}];\n"));
    }
    for i in 0..NVARS - 1 {
        let e = g.expr(1);
        body.push_str(&format!("var v{i}: u32 = {e};\n"));
        g.vars.push((format!("v{i}"), "u32"));
    }
    body.push_str("var f: f32 = x;\n");
    let n = g.r(4) + 1;
    g.stmts(n, &mut body);
    if use_lds {
        body.push_str(&format!(
            "t[lid] = v0;\nbarrier(local);\nv1 = v1 + t[(lid + {}) & {}];\n",
            g.r(local),
            local - 1
        ));
        g.stmts(1, &mut body);
    }
    body.push_str(
        "out[gid * 3] = v0;\nout[gid * 3 + 1] = v1;\nout[gid * 3 + 2] = v2;\noutf[gid] = f;\n",
    );
    let src = format!(
        "kernel g(inp: ptr<global, u32>, fin: ptr<global, f32>, out: ptr<global, u32>, outf: ptr<global, f32>, n: u32, x: f32) {{\n{body}}}\n"
    );
    let kernel = kernel(&src);
    let items = (local * groups) as usize;
    let inp: Vec<u32> = (0..LEN).map(|_| g.r(1000)).collect();
    let fin: Vec<f32> = (0..LEN).map(|_| g.r(2000) as f32 * 0.37 - 300.0).collect();
    TestCase {
        kernel,
        range: NdRange::new(&[local * groups]).with_local(&[local]).with_offset(&[g.r(5)]),
        args: vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::Buffer(3),
            Arg::scalar(g.r(50)),
            Arg::scalar(1.5f32),
        ],
        buffers: vec![
            Buffer::from_slice(&inp),
            Buffer::from_slice(&fin),
            Buffer::zeroed(kiln_ir::Scalar::U32, 3 * items),
            Buffer::zeroed(kiln_ir::Scalar::F32, items),
        ],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn simulator_matches_interpreter_on_random_subset_kernels(seed in any::<u64>()) {
        let case = gen_case(seed);
        let r = differential(&case);
        prop_assert!(r == Ok(true), "{:?}", r);
    }
}

/// A planted miscompile: the analysis is forced to call the divergent `lid` uniform. The
/// backend then keeps it in an SGPR (via `v_readfirstlane_b32`), and the differential test
/// must catch the wrong results, on a fixed kernel and on most random ones.
#[test]
fn planted_miscompile_is_caught() {
    let case = gen_case(7);
    let lid = case.kernel.body().stmts().iter().find_map(|s| match s.node() {
        kiln_ir::StmtNode::Let { var, .. } if var.name() == "lid" => Some(var.clone()),
        _ => None,
    });
    let forced: HashSet<_> = lid.into_iter().collect();
    let mut caught = 0;
    for seed in 0..40u64 {
        let case = gen_case(seed * 7919 + 1);
        assert_eq!(differential(&case), Ok(true), "honest compile must match");
        let div = analyze_with(&case.kernel, &forced);
        let c = compile_with(&case.kernel, &div).unwrap();
        let want = case.run().unwrap();
        let got = simulate(&c, &case);
        if got.is_err() || results_match(&want, &got.unwrap()).is_err() {
            caught += 1;
        }
    }
    assert!(caught >= 20, "only {caught} of 40 planted miscompiles caught");

    // The classic example with v2 forced uniform.
    let k = kernel(
        "kernel classic(inp: ptr<global, i32>, out: ptr<global, i32>) {
            let v1: i32 = inp[0] + inp[1];
            let v2: i32 = v1 + local_id(0) as i32;
            out[local_id(0) * 2] = v1;
            out[local_id(0) * 2 + 1] = v2;
        }",
    );
    let v2 = kiln_ir::Var::new("v2", kiln_ir::Type::I32);
    let case = TestCase {
        kernel: k.clone(),
        range: NdRange::new(&[64]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1)],
        buffers: vec![Buffer::from_slice(&[3i32, 4]), Buffer::zeroed(kiln_ir::Scalar::I32, 128)],
    };
    assert_eq!(differential(&case), Ok(true));
    let bad = compile_with(&k, &analyze_with(&k, &[v2].into_iter().collect())).unwrap();
    let got = simulate(&bad, &case).unwrap();
    let err = results_match(&case.run().unwrap(), &got).unwrap_err();
    assert!(err.contains("element 3"), "{err}");
}

/// Kernels from the shared generator use every type and construct: each one either compiles
/// (and then must match the interpreter) or is rejected with a clear `Unsupported` error,
/// never a panic or wrong code.
#[test]
fn unsupported_constructs_are_rejected_cleanly() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = arb_kernel_with(GenConfig::default());
    for _ in 0..100 {
        let case = strat.new_tree(&mut runner).unwrap().current();
        match compile(&case.kernel) {
            Ok(_) => assert_eq!(differential(&case), Ok(true)),
            Err(Error::Unsupported(m)) => assert!(!m.is_empty()),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn register_pressure_is_a_clear_error() {
    // 300 divergent values live at once exceed the 256 VGPRs.
    let mut src = String::from("kernel big(out: ptr<global, u32>) {\n");
    for i in 0..300 {
        src.push_str(&format!("let a{i}: u32 = local_id(0) * {};\n", i + 3));
    }
    for i in 0..300 {
        src.push_str(&format!("out[local_id(0) + {i}] = a{i};\n"));
    }
    src.push_str("}\n");
    match compile(&kernel(&src)) {
        Err(Error::RegisterPressure(m)) => assert!(m.contains("VGPRs"), "{m}"),
        other => panic!("expected a register-pressure error, got {other:?}"),
    }
}
