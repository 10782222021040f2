//! Hand cases for the divergence analysis, modelled on LLVM's uniformity-analysis tests
//! (llvm/test/Analysis/UniformityAnalysis/AMDGPU): thread-id chains, uniform loads, if-join,
//! temporal divergence, nested loops, uniform loops inside divergent branches, atomics.
//!
//! Each case annotates the kernel (as `kiln divergence` prints it) and checks the tag on the
//! line that starts with a given prefix.

use kiln_ir::parse_module;
use kiln_passes::divergence::{analyze, annotate};

fn ann(src: &str) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let k = &m.kernels[0];
    kiln_ir::verify_kernel(k).unwrap_or_else(|e| panic!("{e:?}"));
    annotate(k, &analyze(k))
}

/// Asserts that the `nth` line (0-based) starting with `prefix` ends with `tag`.
fn tag_nth(a: &str, prefix: &str, nth: usize, tag: &str) {
    let line = a
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix))
        .nth(nth)
        .unwrap_or_else(|| panic!("no line {nth} starting with {prefix:?} in\n{a}"));
    assert!(line.ends_with(tag), "expected `{prefix}` ({nth}) to be {tag}:\n{a}");
}

fn tag(a: &str, prefix: &str, tag: &str) {
    tag_nth(a, prefix, 0, tag)
}

const U: &str = "// uniform";
const D: &str = "// divergent";

#[test]
fn classic_example_v1_uniform_v2_divergent() {
    let a = ann("kernel k(inp: ptr<global, i32>, out: ptr<global, i32>) {
        let v1: i32 = inp[0] + inp[1];
        let v2: i32 = v1 + global_id(0) as i32;
        out[0] = v1;
        out[1] = v2;
    }");
    tag(&a, "let v1", U);
    tag(&a, "let v2", D);
}

#[test]
fn thread_id_chain() {
    let a = ann("kernel k(out: ptr<global, u32>) {
        let a: u32 = local_id(0);
        let b: u32 = a * 2;
        let c: u32 = b + 7;
        let d: u32 = c >> 1;
        out[d] = d;
    }");
    for p in ["let a", "let b", "let c", "let d"] {
        tag(&a, p, D);
    }
}

#[test]
fn work_group_builtins_are_uniform() {
    let a = ann("kernel k(out: ptr<global, u32>) {
        let g: u32 = group_id(0);
        let s: u32 = local_size(0) * num_groups(1) + global_size(2) + global_offset(0);
        let y: u32 = global_id(1);
        let z: u32 = local_id(2);
        out[g] = s + y + z;
    }");
    tag(&a, "let g", U);
    tag(&a, "let s", U);
    tag(&a, "let y", D);
    tag(&a, "let z", D);
}

#[test]
fn kernel_arguments_are_uniform() {
    let a = ann("kernel k(n: u32, x: f32, out: ptr<global, f32>) {
        let m: u32 = n * 3 + 1;
        let y: f32 = x * 2.0;
        out[m] = y;
    }");
    tag(&a, "let m", U);
    tag(&a, "let y", U);
}

#[test]
fn uniform_load_global_and_constant() {
    let a = ann("kernel k(p: ptr<global, u32>, c: ptr<constant, u32>, out: ptr<global, u32>) {
        let a: u32 = p[3];
        let b: u32 = c[a];
        let d: u32 = p[global_id(0)];
        out[0] = a + b + d;
    }");
    tag(&a, "let a", U);
    tag(&a, "let b", U);
    tag(&a, "let d", D);
}

#[test]
fn generic_and_private_loads_are_divergent() {
    let a = ann("kernel k(g: ptr<generic, u32>, out: ptr<global, u32>) {
        private arr: u32[4];
        let a: u32 = g[0];
        let b: u32 = arr[0];
        out[0] = a + b;
    }");
    tag(&a, "let a", D);
    tag(&a, "let b", D);
}

#[test]
fn local_load_with_uniform_index_is_uniform() {
    let a = ann("kernel k(out: ptr<global, u32>) #reqd_work_group_size(64, 1, 1) {
        local t: u32[64];
        t[local_id(0)] = local_id(0);
        barrier(local);
        let a: u32 = t[5];
        let b: u32 = t[local_id(0)];
        out[0] = a + b;
    }");
    tag(&a, "let a", U);
    tag(&a, "let b", D);
}

#[test]
fn atomic_results_are_divergent() {
    let a = ann("kernel k(c: ptr<global, u32>, out: ptr<global, u32>) {
        let old: u32 = atomic_add(c, 0, 1);
        let x: u32 = old + 1;
        out[0] = x;
    }");
    tag(&a, "let old", D);
    tag(&a, "let x", D);
}

#[test]
fn if_join_makes_assigned_var_divergent() {
    // LLVM: phi at the join of a divergent branch.
    let a = ann("kernel k(out: ptr<global, u32>) {
        var x: u32 = 0;
        if global_id(0) < 5 {
            x = 1;
        } else {
            x = 2;
        }
        let y: u32 = x;
        out[0] = y;
    }");
    tag(&a, "var x", U);
    tag_nth(&a, "x = 1", 0, U); // uniform among the active lanes
    tag(&a, "let y", D);
}

#[test]
fn uniform_if_join_stays_uniform() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var x: u32 = 0;
        if n < 5 {
            x = 1;
        } else {
            x = 2;
        }
        let y: u32 = x;
        out[0] = y;
    }");
    tag(&a, "if n < 5", "// branch uniform");
    tag(&a, "let y", U);
}

#[test]
fn divergent_if_without_else_join() {
    let a = ann("kernel k(out: ptr<global, u32>) {
        var x: u32 = 7;
        if local_id(0) == 0 {
            x = 1;
        }
        let y: u32 = x + 1;
        out[0] = y;
    }");
    tag(&a, "let y", D);
}

#[test]
fn same_value_on_both_sides_still_divergent_conservatively_only_if_assigned() {
    // A var not assigned under the divergent branch stays uniform after the join.
    let a = ann("kernel k(out: ptr<global, u32>, n: u32) {
        var x: u32 = n;
        var z: u32 = 0;
        if local_id(0) == 0 {
            z = 1;
        }
        let y: u32 = x + 1;
        out[y] = z;
    }");
    tag(&a, "let y", U);
}

#[test]
fn lets_inside_divergent_branch_are_uniform_inside() {
    let a = ann("kernel k(p: ptr<global, u32>, out: ptr<global, u32>) {
        if global_id(0) < 3 {
            let a: u32 = p[0] * 2;
            out[a] = a;
        }
    }");
    tag(&a, "let a", U);
}

#[test]
fn temporal_divergence_while() {
    // LLVM temporal-divergence: i is uniform inside the loop, divergent after it.
    let a = ann("kernel k(out: ptr<global, u32>) {
        var i: u32 = 0;
        while i < local_id(0) {
            i = i + 1;
            let inside: u32 = i * 2;
            out[inside] = 0;
        }
        let after: u32 = i;
        out[after] = 1;
    }");
    tag(&a, "while", "// exit divergent");
    tag(&a, "i = i + 1", U);
    tag(&a, "let inside", U);
    tag(&a, "let after", D);
}

#[test]
fn temporal_divergence_for_bound() {
    let a = ann("kernel k(out: ptr<global, u32>) {
        var s: u32 = 0;
        for j: u32 in 0 .. global_id(0) % 4 {
            s = s + j;
        }
        let after: u32 = s;
        out[0] = after;
    }");
    tag(&a, "for j", "j uniform, exit divergent");
    tag(&a, "s = s + j", U);
    tag(&a, "let after", D);
}

#[test]
fn uniform_loop_keeps_values_uniform_after() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var s: u32 = 0;
        for j: u32 in 0 .. n {
            s = s + j;
        }
        let after: u32 = s;
        out[0] = after;
    }");
    tag(&a, "for j", "j uniform, exit uniform");
    tag(&a, "let after", U);
}

#[test]
fn divergent_lower_bound_makes_counter_divergent() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        for j: u32 in local_id(0) .. n {
            out[j] = j;
        }
    }");
    tag(&a, "for j", "j divergent, exit divergent");
}

#[test]
fn loop_carried_divergence_reaches_fixed_point() {
    // x becomes divergent only in the second iteration: y = x picks up tid in the first.
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var x: u32 = 0;
        var y: u32 = 0;
        for j: u32 in 0 .. n {
            x = y;
            y = local_id(0);
        }
        let after: u32 = x;
        out[0] = after;
    }");
    tag(&a, "x = y", D);
    tag(&a, "let after", D);
}

#[test]
fn uniform_loop_inside_divergent_branch_stays_uniform_inside() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var s: u32 = 0;
        if global_id(0) < 10 {
            for j: u32 in 0 .. n {
                s = s + j;
                let t: u32 = s;
                out[t] = 0;
            }
        }
        let after: u32 = s;
        out[0] = after;
    }");
    tag(&a, "for j", "j uniform, exit uniform");
    tag(&a, "let t", U);
    tag(&a, "let after", D);
}

#[test]
fn nested_loops_inner_divergent_exit() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var outer: u32 = 0;
        for i: u32 in 0 .. n {
            var inner: u32 = 0;
            while inner < local_id(0) {
                inner = inner + 1;
            }
            let x: u32 = inner;
            outer = outer + 1;
            out[x] = outer;
        }
        let after: u32 = outer;
        out[0] = after;
    }");
    tag(&a, "let x", D);
    tag(&a, "outer = outer + 1", U);
    tag(&a, "let after", U);
}

#[test]
fn nested_loops_outer_divergent_exit() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var acc: u32 = 0;
        var i: u32 = 0;
        while i < global_id(0) {
            for j: u32 in 0 .. n {
                acc = acc + j;
            }
            let inside: u32 = acc;
            out[inside] = 0;
            i = i + 1;
        }
        let after: u32 = acc;
        out[0] = after;
    }");
    tag(&a, "let inside", U);
    tag(&a, "let after", D);
}

#[test]
fn divergent_if_inside_loop_poisons_next_iteration() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var x: u32 = 0;
        for j: u32 in 0 .. n {
            let seen: u32 = x;
            out[seen] = j;
            if local_id(0) == j {
                x = x + 1;
            }
        }
    }");
    tag(&a, "let seen", D);
}

#[test]
fn reassignment_with_uniform_value_restores_uniformity() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var x: u32 = local_id(0);
        let a: u32 = x;
        x = n;
        let b: u32 = x;
        out[a] = b;
    }");
    tag(&a, "let a", D);
    tag(&a, "let b", U);
}

#[test]
fn select_and_casts_propagate() {
    let a = ann("kernel k(n: i32, out: ptr<global, f32>) {
        let c: bool = local_id(0) > 3;
        let s: i32 = c ? n : 0;
        let f: f32 = n as f32;
        let g: f32 = s as f32;
        out[0] = f + g;
    }");
    tag(&a, "let c", D);
    tag(&a, "let s", D);
    tag(&a, "let f", U);
    tag(&a, "let g", D);
}

#[test]
fn intrinsics_propagate() {
    let a = ann("kernel k(x: f32, out: ptr<global, f32>) {
        let a: f32 = sqrt(x);
        let b: f32 = max(a, local_id(0) as f32);
        out[0] = a + b;
    }");
    tag(&a, "let a", U);
    tag(&a, "let b", D);
}

#[test]
fn divergent_load_address_from_uniform_loop_in_divergent_loop() {
    // A uniform while loop nested in a divergent one: uniform inside; temporal divergence
    // only from the outer loop.
    let a = ann("kernel k(p: ptr<global, u32>, n: u32, out: ptr<global, u32>) {
        var i: u32 = 0;
        var w: u32 = 0;
        while i < local_id(0) {
            var u: u32 = 0;
            while u < n {
                u = u + 1;
                w = p[u % 4];
            }
            let in_outer: u32 = w;
            out[in_outer] = 0;
            i = i + 1;
        }
        let after: u32 = w;
        out[0] = after;
    }");
    tag_nth(&a, "while", 1, "// exit uniform");
    tag(&a, "let in_outer", U);
    tag(&a, "let after", D);
}

#[test]
fn if_else_chain_join() {
    let a = ann("kernel k(n: u32, out: ptr<global, u32>) {
        var x: u32 = 0;
        if n == 0 {
            x = 1;
        } else if local_id(0) == 0 {
            x = 2;
        } else {
            x = 3;
        }
        let y: u32 = x;
        out[0] = y;
    }");
    tag(&a, "if n == 0", "// branch uniform");
    tag(&a, "let y", D);
}

#[test]
fn atomic_inside_uniform_code_and_result_use_in_branch() {
    let a = ann("kernel k(c: ptr<global, u32>, out: ptr<global, u32>) {
        var x: u32 = 0;
        let old: u32 = atomic_add(c, 0, 1);
        if old == 0 {
            x = 5;
        }
        let y: u32 = x;
        out[0] = y;
    }");
    tag(&a, "if old == 0", "// branch divergent");
    tag(&a, "let y", D);
}

#[test]
fn reduce_example() {
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/reduce.kir"))
            .unwrap();
    let a = ann(&src);
    tag(&a, "let gid", D);
    tag(&a, "let lid", D);
    tag(&a, "while stride > 0", "// exit uniform");
    tag(&a, "stride = stride / 2", U);
}

/// Issue 12 (every pass near-linear on long straight-line code): the facts kept per
/// statement hold only the mutable state, never every divergent `let` bound so far (that was
/// a set per statement growing with the chain: quadratic time and memory, 8.4 GB for 20,000
/// lets through `kiln emit --target amdgpu`). Each `let` is still classified right.
#[test]
fn long_divergent_let_chain_keeps_per_statement_facts_small() {
    use kiln_ir::StmtNode;
    let n = 20_000;
    let mut src = String::from(
        "kernel chain(x: ptr<global, u32>, y: ptr<global, u32>) {\n  let g: u32 = global_id(0);\n  let v0: u32 = x[g];\n  let w0: u32 = y[0];\n",
    );
    for i in 1..n {
        src.push_str(&format!("  let v{i}: u32 = v{} * 3u32 + w{};\n", i - 1, i - 1));
        src.push_str(&format!("  let w{i}: u32 = w{} + 1u32;\n", i - 1));
    }
    src.push_str(&format!("  x[g] = v{};\n}}\n", n - 1));
    let m = parse_module(&src).unwrap_or_else(|e| panic!("{e}"));
    let k = kiln_ir::depth::bound_kernel(&m.kernels[0]);
    let div = analyze(&k);
    let StmtNode::Block(stmts) = k.body().node() else { panic!("body is not a block") };
    for s in stmts.iter() {
        assert!(div.divergent_before(s).is_empty(), "facts grew at {s}");
        if let StmtNode::Let { var, .. } = s.node() {
            let want = var.name().starts_with('v') || var.name() == "g";
            assert_eq!(div.binding_divergent(s), Some(want), "{s}");
            assert_eq!(div.ever_divergent(var), want, "{s}");
        }
    }
    let last = stmts.last().unwrap();
    let v = kiln_ir::Var::new(format!("v{}", n - 1), kiln_ir::Type::Scalar(kiln_ir::Scalar::U32));
    assert!(div.is_divergent_before(last, &v));
}

/// Immutable bindings get one fact per name: a name bound uniform in one branch and
/// divergent in its sibling is divergent in both (conservative, never the reverse).
#[test]
fn sibling_lets_of_one_name_are_divergent_if_either_is() {
    use kiln_ir::StmtNode;
    let m = parse_module(
        "kernel k(x: ptr<global, u32>, c: u32) {
  if c > 0u32 {
    let t: u32 = x[0];
    x[1] = t;
  } else {
    let t: u32 = x[global_id(0)];
    x[global_id(0)] = t;
  }
}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let k = &m.kernels[0];
    let div = analyze(k);
    let StmtNode::Block(top) = k.body().node() else { panic!("body is not a block") };
    let StmtNode::If { then, .. } = top[0].node() else { panic!("no if") };
    let StmtNode::Block(then) = then.node() else { panic!("then is not a block") };
    let t = kiln_ir::Var::new("t", kiln_ir::Type::Scalar(kiln_ir::Scalar::U32));
    assert_eq!(div.binding_divergent(&then[0]), Some(false));
    assert!(div.is_divergent_before(&then[1], &t));
    assert!(div.ever_divergent(&t));
}
