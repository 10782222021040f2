//! A small generator of 32-bit kernels for the AMDGPU backend's differential tests and fuzz
//! target, besides the shared one in `kiln_ir::testing`: it assigns outer variables under
//! divergent `if`s and loops, and uses local memory across two waves, far more often.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Kernel, Scalar};

/// A generated kernel with everything needed to run it.
#[derive(Clone, Debug)]
pub struct GenCase {
    /// The kernel.
    pub kernel: Kernel,
    /// Its nd-range.
    pub range: NdRange,
    /// One argument per parameter.
    pub args: Vec<Arg>,
    /// The initial buffers.
    pub buffers: Vec<Buffer>,
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
    /// A divisor in -20..=20 other than 0, parenthesized.
    fn nonzero(&mut self) -> String {
        let k = self.r(40) as i32 - 20;
        format!("({})", if k >= 0 { k + 1 } else { k })
    }

    fn leaf(&mut self) -> String {
        match self.r(9) {
            0 => "lid".into(),
            1 => "gid".into(),
            2 => "group_id(0)".into(),
            3 => "n".into(),
            4 => format!("{}u32", self.r(100)),
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
        match self.r(16) {
            14 => format!("(({a} as i32 / {}) as u32)", self.nonzero()),
            15 => format!("(({a} as i32 % {}) as u32)", self.nonzero()),
            12 => format!("({a} / {})", self.r(40) + 1),
            13 => format!("({a} % {})", self.r(40) + 1),
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

/// A random subset kernel with its nd-range, arguments and buffers.
pub fn gen_case(seed: u64) -> GenCase {
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
    let kernel = parse_module(&src).expect("generated kernels parse").kernels.remove(0);
    let items = (local * groups) as usize;
    let inp: Vec<u32> = (0..LEN).map(|_| g.r(1000)).collect();
    let fin: Vec<f32> = (0..LEN).map(|_| g.r(2000) as f32 * 0.37 - 300.0).collect();
    GenCase {
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
            Buffer::zeroed(Scalar::U32, 3 * items),
            Buffer::zeroed(Scalar::F32, items),
        ],
    }
}
