//! The PTX backend lowers lane-wise vector arithmetic one statement at a time
//! (`kiln_passes::vectors::StmtLanes`) instead of rewriting the whole kernel first: the text
//! must be the same byte for byte as through the whole kernel's vector lowering
//! (`emit_module_lowering_vectors`, what the backend did before), for kernels that mix the
//! memory form (vector loads bound to `let`s, lane reads, stores of built vectors) with
//! lane-wise operations, broadcasts, masks, casts, built-ins first read inside a lowered
//! statement, vector names reused in sibling scopes, and kernels the shortcut refuses
//! (mutable vectors, lane-wise conditions); and for every `.kir` file of the repository.

use std::path::{Path, PathBuf};

use kiln_backends::ptx::{emit_module, emit_module_lowering_vectors, Options};
use kiln_ir::{parse_module, Module};

/// Kernels that each exercise one way a statement is lowered on its own.
const CASES: &[&str] = &[
    // The GEMM epilogue: a broadcast times a vector built from `var`s, stored.
    "kernel epilogue(c: ptr<global, f32>, alpha: f32) {
        var a0: f32 = 1.0; var a1: f32 = 2.0; var a2: f32 = 3.0; var a3: f32 = 4.0;
        let i: i32 = global_id(0) as i32 * 4;
        for k: i32 in 0..4 { a0 = a0 * 2.0; a3 = a3 + a1; }
        vstore(c, i, f32x4(alpha) * f32x4(a0, a1, a2, a3));
        vstore(c, i + 4, f32x4(a3, a2, a1, a0));
    }",
    // Lane-wise lets read later lane by lane, in stores and in scalar expressions.
    "kernel lanes(x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
        let i: u32 = global_id(0) * 4u32;
        let v: f32x4 = vload4(x, i);
        let w: f32x4 = v * v + f32x4(extract(v, 3));
        let s: f32 = extract(w, 0) + extract(w, 1) * extract(v, 2);
        y[i] = s;
        vstore(y, i, w);
        vstore(x, i, w - v);
        if n > 3u32 { y[i + 1u32] = extract(w, 2); }
    }",
    // A built-in first read inside a lowered statement's broadcast, another in its index.
    "kernel builtins(o: ptr<global, f32>) {
        vstore(o, global_id(1) * 4u32, f32x4(local_id(0) as f32) + f32x4(1.0, 2.0, 3.0, 4.0));
        o[0] = group_id(0) as f32;
    }",
    // Masks, selects and casts lane by lane; an integer vector.
    "kernel masks(x: ptr<global, f32>, q: ptr<global, i32>) {
        let i: u32 = global_id(0) * 4u32;
        let v: f32x4 = vload4(x, i);
        let m: boolx4 = v < f32x4(0.0) | v == f32x4(9.0);
        vstore(x, i, m ? f32x4(0.0) : v);
        let t: i32x4 = v as i32;
        vstore(q, i, t + vload4(q, i));
        vstore(q, i + 4u32, select(extract(v, 0) > 1.0, t, i32x4(7)));
    }",
    // The same vector names in sibling scopes, once lane-wise and once a load.
    "kernel siblings(x: ptr<global, f32>, n: u32) {
        let i: u32 = global_id(0) * 4u32;
        if n > 1u32 {
            let v: f32x4 = vload4(x, i) * f32x4(2.0);
            vstore(x, i, v);
        }
        if n > 2u32 {
            let v: f32x4 = vload4(x, i + 4u32);
            vstore(x, i + 8u32, v + v);
            x[i] = extract(v, 1);
        }
        for k: u32 in 0u32..n {
            let v: f32x4 = vload4(x, k * 4u32);
            let u: f32x4 = v * v;
            vstore(x, k * 4u32, u);
        }
    }",
    // A lane of a lane-wise expression inside a scalar statement, and in a call.
    "kernel inner(x: ptr<global, f32>, h: ptr<global, u32>) {
        let i: u32 = global_id(0) * 4u32;
        let v: f32x4 = vload4(x, i);
        x[i] = extract(v * f32x4(3.0), 2) + 1.0;
        let z: u32 = atomic_add(h, 0u32, extract(vload4(h, i) + u32x4(1u32), 0));
        h[1] = z;
    }",
    // Refused by the shortcut (a mutable vector; a lane-wise condition): the whole kernel is
    // lowered first, as before.
    "kernel mutable(x: ptr<global, f32>, y: ptr<global, f32>, a: f32) {
        let i: u32 = global_id(0) * 4u32;
        let xv: f32x4 = vload4(x, i);
        var acc: f32x4 = f32x4(a) * xv;
        acc = insert(acc, 3, extract(xv, 0));
        vstore(y, i, acc + vload4(y, i));
    }",
    "kernel cond(x: ptr<global, f32>) {
        let i: u32 = global_id(0) * 4u32;
        if extract(vload4(x, i) * f32x4(2.0), 1) > 0.0 { x[i] = 1.0; }
    }",
    // f32x8 (two v4 accesses) and f16 lanes.
    "kernel wide(x: ptr<global, f32>, h: ptr<global, f16>) {
        let i: u32 = global_id(0) * 8u32;
        let v: f32x8 = vload8(x, i);
        vstore(x, i, v + v);
        let g: f16x4 = vload4(h, i);
        vstore(h, i, (g as f32 * f32x4(0.5)) as f16);
    }",
];

/// Asserts both lowerings of `m` give the same PTX for each target (or the same error).
fn same(m: &Module, what: &str) {
    for sm in [70, 80, 90] {
        let o = Options::sm(sm);
        let (a, b) = (emit_module(m, &o), emit_module_lowering_vectors(m, &o));
        match (a, b) {
            (Ok(a), Ok(b)) => {
                if a != b {
                    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(0);
                    panic!(
                        "{what}, sm_{sm}: the PTX differs from line {}:\n{}\n-- lowered whole:\n{}",
                        line + 1,
                        a.lines().skip(line).take(8).collect::<Vec<_>>().join("\n"),
                        b.lines().skip(line).take(8).collect::<Vec<_>>().join("\n"),
                    );
                }
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}, sm_{sm}"),
            (a, b) => panic!("{what}, sm_{sm}: {:?} but lowered whole {:?}", a.err(), b.err()),
        }
    }
}

#[test]
fn statement_lowering_gives_the_whole_kernel_lowerings_ptx() {
    for src in CASES {
        let m = parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let name = m.kernels[0].name().to_string();
        same(&m, &name);
        // And after the -O pipeline, whose output is what devices emit.
        let opt = Module::new(m.kernels.iter().map(kiln_passes::pipeline::optimize).collect());
        same(&opt, &format!("{name} after -O"));
    }
}

/// Every `.kir` file under `dir`, recursively.
fn kir_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            kir_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "kir") {
            out.push(p);
        }
    }
}

#[test]
fn statement_lowering_matches_on_every_kir_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for d in ["examples", "tests", "backends/tests"] {
        kir_files(&root.join(d), &mut files);
    }
    files.sort();
    let mut emitted = 0;
    for f in &files {
        let Ok(src) = std::fs::read_to_string(f) else { continue };
        // Files that do not parse or verify are error cases of other tests.
        let Ok(m) = parse_module(&src) else { continue };
        if kiln_ir::Verified::new(m.clone()).is_err() {
            continue;
        }
        same(&m, &f.display().to_string());
        emitted += 1;
    }
    assert!(emitted > 50, "only {emitted} kernels found under {}", root.display());
}

/// `Expr::has_vector`, which the statement lowering relies on to skip scalar trees: set for
/// a tree with a vector anywhere (a lane read's operand), not for scalar ones.
#[test]
fn has_vector_marks_the_trees_that_hold_a_vector() {
    use kiln_ir::{AddrSpace, Expr, Scalar, Type, Var};
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::F32));
    let i = Var::new("i", Type::U32);
    let v = Expr::vload(&x, i.expr(), 4);
    let lane = v.extract(2);
    let scalar = x.load(i.expr()) * Expr::f32(2.0);
    assert!(v.has_vector() && lane.has_vector());
    assert!((lane.clone() + scalar.clone()).has_vector(), "a lane read inside");
    assert!(!scalar.has_vector() && !i.expr().has_vector());
    let v2 = Var::new("v", Type::Vector(Scalar::F32, 4));
    assert!(v2.expr().extract(0).has_vector(), "a lane of a vector variable");
}
