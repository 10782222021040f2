//! Simplifier benchmark over a corpus of index expressions: hand-written ones plus ones the
//! nd-range remapping formulas of kernel fusion produce (linearize/delinearize round trips,
//! offsets, group/local decompositions). Prints, before criterion's own measurement, the
//! median time per expression (each simplified from scratch, 15 runs each, median of the
//! per-expression medians) and the node-count reduction for each part of the corpus, for
//! the default limits and, as a reference measured in the same run, with the cheap
//! pre-simplifier off (every expression through the e-graph).
//!
//! `cargo bench -p kiln-passes --bench simplify`

// The corpus is deliberately redundant: it is the simplifier's input.
#![allow(clippy::eq_op, clippy::erasing_op)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::{Builtin, Expr, Scalar, Type, Var};
use kiln_passes::simplify::{node_count, simplify_expr, simplify_expr_with, Limits};

fn k(ty: Scalar, v: i128) -> Expr {
    Expr::int(ty, v)
}

/// Expressions as the fusion design's remapping formulas produce them.
fn remapping_corpus() -> Vec<Expr> {
    let mut out = Vec::new();
    let gid = Expr::builtin(Builtin::GlobalId, 0);
    let lid = Expr::builtin(Builtin::LocalId, 0);
    let grp = Expr::builtin(Builtin::GroupId, 0);
    let lsz = Expr::builtin(Builtin::LocalSize, 0);
    let u = Scalar::U32;
    for &c0 in &[2i128, 3, 4, 5, 7, 8, 16, 32, 64, 100] {
        let c = k(u, c0);
        // 1-D -> 2-D -> 1-D round trip.
        let x = &gid % &c;
        let y = &gid / &c;
        out.push(&y * &c + &x);
        out.push(&x + &(&c * &y));
        // With an offset (remapping into a sub-range).
        let off = k(u, c0 + 1);
        let g2 = &gid + &off;
        out.push(&(&g2 / &c) * &c + &(&g2 % &c) - &off);
        // Re-taking the remainder.
        out.push(&(&x % &c) + &(&y * &c));
        // Group/local decomposition with a known work-group size.
        let lin = &grp * &c + &lid;
        out.push(&(&lin / &c) * &c + &(&lin % &c));
        // Linear id of a 2-D range (c0 x 4), recomputed from its coordinates.
        let c1 = k(u, 4);
        let xx = &gid % &c;
        let yy = &(&gid / &c) % &c1;
        out.push(&(&yy * &c + &xx) * k(u, 1) + k(u, 0));
        // Index arithmetic with neutral elements left by substitution.
        out.push(&(&gid * k(u, 1) + k(u, 0)) - &(&lsz * k(u, 0)));
        out.push(&(&gid + &c) - &c);
        // Signed variants (i32 indices).
        let gi = gid.cast(Scalar::I32);
        let ci = k(Scalar::I32, c0);
        out.push(&(&gi / &ci) * &ci + &(&gi % &ci));
        out.push(&(&(&gi % &ci) % &ci) + &(&(&gi / &ci) * &ci));
        // 64-bit.
        let g64 = gid.cast(Scalar::U64);
        let c64 = k(Scalar::U64, c0);
        out.push(&(&g64 / &c64) * &c64 + &(&g64 % &c64));
        out.push(&(&(&g64 % &c64) + k(Scalar::U64, 0)) + &(&(&g64 / &c64) * &c64));
        // Two fused kernels' ids differing by a constant stride.
        out.push(&(&(&gid * &c) + &lid) - &(&lid + &(&gid * &c)) + &gid);
        // Nested remainder by the same constant plus a zero offset.
        out.push(&(&(&gid % &c) % &c) * k(u, 1));
        // Delinearize 3-D then linearize: z, y, x with sizes (c0, 2, 2).
        let two = k(u, 2);
        let x3 = &gid % &c;
        let rest = &gid / &c;
        let y3 = &rest % &two;
        let z3 = &rest / &two;
        out.push(&(&(&z3 * &two + &y3) * &c) + &x3);
        // An index computed twice and subtracted.
        out.push(&(&(&gid / &c) * &c) - &(&(&gid / &c) * &c) + &(&gid % &c));
        // Product of sums left by remapping.
        out.push(&(&c * &(&gid + k(u, 1))) - &c);
        out.push(&(&(&lid + &(&grp * &c)) * k(u, 2)) - &(&lid + &(&grp * &c)));
        out.push(&(&(&gid % &c) + &(&gid / &c) * &c) % k(u, 1 << 20));
        out.push(&(&gid - &(&gid % &c)) / &c);
    }
    out
}

/// Hand-written index expressions (most already simple).
fn hand_corpus() -> Vec<Expr> {
    let i = Var::new("i", Type::U32);
    let j = Var::new("j", Type::U32);
    let n = Var::new("n", Type::U32);
    let a = Var::new("a", Type::I32);
    let b = Var::new("b", Type::I32);
    let (ie, je, ne) = (i.expr(), j.expr(), n.expr());
    vec![
        2 * (&a + &b) - a.expr(),
        &ie * &ne + &je,
        &(&ie + 1u32) * &ne + &je - &ne,
        &(&ie * 4u32 + &je) % 64u32,
        &ie / 2u32 * 2u32 + &ie % 2u32,
        &(&a * 3) + &a,
        &(&a - &b) + &b,
        &(&a + &b) - &a,
        &(&ie + &je) * 2u32 - &ie - &je,
        (&ie * &ne).min(&ne * &ie),
        Expr::select(ie.cmp_lt(&ne), &ie + 0u32, ie.clone()),
        &(&ie << 0u32) + &(&je >> 0u32),
        &(&ie & 0xffff_ffffu32) | 0u32,
        &(&ie ^ &ie) + &je,
        -(-a.expr()) + 0,
        &(&a * -1) + &a,
        &(&ie * 0u32) + &ie * 1u32,
        &(&ie % &ne) + &(&ie / &ne) * &ne,
        &(&ie / &ne) * &ne + &ie % &ne,
        &(&(&ie + &je) + &ne) - &(&je + &ne),
    ]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn report(name: &str, corpus: &[Expr], limits: &Limits) -> Vec<f64> {
    let simplify_expr = |e: &Expr| simplify_expr_with(e, limits);
    let before: usize = corpus.iter().map(node_count).sum();
    let after: usize = corpus.iter().map(|e| node_count(&simplify_expr(e))).sum();
    let mut per_expr = Vec::new();
    for e in corpus {
        let mut runs: Vec<f64> = (0..15)
            .map(|_| {
                let t = Instant::now();
                black_box(simplify_expr(black_box(e)));
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        per_expr.push(median(&mut runs));
    }
    let med = median(&mut per_expr.clone());
    println!(
        "{name}: {} expressions, median {med:.1} us/expression, nodes {before} -> {after} \
         ({:.1}% fewer)",
        corpus.len(),
        100.0 * (before - after.min(before)) as f64 / before as f64
    );
    per_expr
}

fn bench(c: &mut Criterion) {
    let remap = remapping_corpus();
    let hand = hand_corpus();
    let reference = Limits { presimplify: false, ..Limits::default() };
    for (label, limits) in
        [("default", &Limits::default()), ("reference, e-graph only", &reference)]
    {
        println!("-- {label}");
        let mut all = report("remapping", &remap, limits);
        all.extend(report("hand-written", &hand, limits));
        println!(
            "whole corpus: {} expressions, median {:.1} us/expression",
            all.len(),
            median(&mut all)
        );
    }
    let corpus: Vec<Expr> = remap.into_iter().chain(hand).collect();
    c.bench_function("simplify corpus (per whole corpus)", |b| {
        b.iter(|| {
            for e in &corpus {
                black_box(simplify_expr(black_box(e)));
            }
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .measurement_time(std::time::Duration::from_secs(3))
        .warm_up_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
