//! Source names of fault sites (`kiln_passes::origin`): recorded on the divisions that may
//! fail, invisible to equality and printing, kept by the passes of the `-O` pipeline, and
//! quoted by the interpreter. And the first error of a work-item stays the source's where
//! CSE and `mad` fusion reorder the loads and divisions of a statement.

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, BinOp, Expr, ExprNode, Kernel, Visitor};
use kiln_passes::origin::record_origins;
use kiln_passes::pipeline::optimize;
use kiln_passes::simplify::simplify_expr;

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}")).kernels[0].clone()
}

/// Every integer `/` and `%` of `k`, with its origin.
fn divisions(k: &Kernel) -> Vec<(String, Option<String>)> {
    struct Find(Vec<(String, Option<String>)>);
    impl Visitor for Find {
        fn visit_expr(&mut self, e: &Expr) {
            if let ExprNode::Binary { op: BinOp::Div | BinOp::Rem, .. } = e.node() {
                self.0.push((e.to_string(), e.origin().map(str::to_string)));
            }
            kiln_ir::walk_expr(self, e);
        }
    }
    let mut f = Find(Vec::new());
    f.visit_kernel(k);
    f.0
}

const ISSUE: &str = "kernel k(x: ptr<global, u32>, a: ptr<global, u32>, o: ptr<global, u32>) {
   let i: u32 = global_id(0);
   o[i] = x[i] / a[(i + 1) % 8] + x[i] * a[(i + 1) % 8] + x[i] / 4;
 }";

#[test]
fn only_divisions_that_may_fail_are_named_and_the_name_is_invisible() {
    let k = kernel(ISSUE);
    let r = record_origins(&k);
    // Equal, printed the same, and recording again changes nothing.
    assert_eq!(r.to_string(), k.to_string());
    assert!(r.body().is_equal(k.body()));
    assert!(record_origins(&r).body().ptr_eq(r.body()));
    let mut d = divisions(&r);
    d.sort();
    assert_eq!(
        d,
        vec![
            ("(i + 1) % 8".into(), None),
            ("(i + 1) % 8".into(), None),
            ("x[i] / 4".into(), None),
            ("x[i] / a[(i + 1) % 8]".into(), Some("`x[i] / a[(i + 1) % 8]`".into())),
        ]
    );
}

#[test]
fn the_pipeline_keeps_the_name_of_a_rewritten_division() {
    let opt = optimize(&kernel(ISSUE));
    let named: Vec<_> = divisions(&opt).into_iter().filter(|(_, o)| o.is_some()).collect();
    assert_eq!(named.len(), 1, "{opt}");
    let (text, origin) = &named[0];
    // The division itself was rewritten (CSE'd operands, `% 8` as `& 7`), its name was not.
    assert_ne!(text, "x[i] / a[(i + 1) % 8]", "{opt}");
    assert_eq!(origin.as_deref(), Some("`x[i] / a[(i + 1) % 8]`"));
    // The interpreter quotes the name too, on the optimized kernel as on the source.
    let bufs = [
        Buffer::from_slice(&[9u32; 8]),
        Buffer::from_slice(&[1u32, 1, 1, 0, 1, 1, 1, 1]),
        Buffer::zeroed(kiln_ir::Scalar::U32, 8),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let range = NdRange::new(&[8]);
    let want = run(&kernel(ISSUE), &range, &args, &mut bufs.to_vec()).unwrap_err();
    let got = run(&opt, &range, &args, &mut bufs.to_vec()).unwrap_err();
    assert_eq!(want, got);
    assert_eq!(got.message, "integer division by zero in `x[i] / a[(i + 1) % 8]`");
}

#[test]
fn the_simplifier_keeps_a_named_division_whole_and_simplifies_its_operands() {
    let k = record_origins(&kernel(
        "kernel k(a: ptr<global, u32>, o: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           o[i] = (i + 0) / (a[i] * 1) + (n * 0) % (a[i] + 0);
         }",
    ));
    let simplified = kiln_passes::simplify::simplify_kernel(&k);
    let mut d = divisions(&simplified);
    d.sort();
    assert_eq!(
        d,
        vec![
            ("0 % a[i]".into(), Some("`n * 0 % (a[i] + 0)`".into())),
            ("i / a[i]".into(), Some("`(i + 0) / (a[i] * 1)`".into())),
        ],
        "{simplified}"
    );
    // Once its divisor is a non-zero constant, a named division cannot fail: it is an
    // operator again, which the rules fold into.
    let x = kiln_ir::Var::new("x", kiln_ir::Type::U32);
    let named = (x.expr() / (Expr::u32(3) + 1)).with_origin("`x / (3 + 1)`".into());
    let s = simplify_expr(&named);
    assert_eq!(s.to_string(), "x / 4");
    assert!(s.origin().is_none());
}

#[test]
fn cse_and_mad_fusion_keep_the_first_failing_load() {
    // At work-item 4 `c[i]`, `a[i]` and `b[i]` are all out of bounds: the source names `c`.
    let k = kernel(
        "kernel k(a: ptr<global, i32>, b: ptr<global, i32>, c: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[i] = c[i] + a[i] * a[i] + b[i] / (a[i] - c[i]);
           o[i] = c[i] + a[i] * b[i];
         }",
    );
    let bufs = [
        Buffer::from_slice(&[3i32; 4]),
        Buffer::from_slice(&[2i32; 4]),
        Buffer::from_slice(&[1i32; 4]),
        Buffer::zeroed(kiln_ir::Scalar::I32, 8),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    let range = NdRange::new(&[8]);
    let want = run(&k, &range, &args, &mut bufs.to_vec()).unwrap_err();
    assert_eq!(want.message, "load `c[4]` out of bounds (buffer has 4 elements)");
    let cse = kiln_passes::cse::cse(&k);
    assert!(cse.to_string().contains("let cse"), "nothing bound:\n{cse}");
    let fused = kiln_passes::peephole::peephole(&k);
    for (what, out) in [("cse", &cse), ("peephole", &fused), ("-O", &optimize(&k))] {
        let got = run(out, &range, &args, &mut bufs.to_vec()).unwrap_err();
        assert_eq!(got, want, "{what}:\n{out}");
    }
}

#[test]
fn the_simplifier_keeps_the_first_failing_division() {
    // Factoring `x * y + x * y` into `y * (x + x)` would reach `d[i] % d[i]` before
    // `d[i] / d[i]`: where `d[i]` is 0 the source reports the division.
    let k = kernel(
        "kernel k(d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           o[i] = d[i] / d[i] * (d[i] + d[i] % d[i]) + d[i] / d[i] * (d[i] + d[i] % d[i]);
         }",
    );
    let bufs = [Buffer::from_slice(&[3u32, 0, 2, 1]), Buffer::zeroed(kiln_ir::Scalar::U32, 4)];
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let range = NdRange::new(&[4]);
    let want = run(&k, &range, &args, &mut bufs.to_vec()).unwrap_err();
    assert_eq!(want.message, "integer division by zero in `d[i] / d[i]`");
    let simplified = kiln_passes::simplify::simplify_kernel(&record_origins(&k));
    for (what, out) in [("simplify", &simplified), ("-O", &optimize(&k))] {
        assert_eq!(
            run(out, &range, &args, &mut bufs.to_vec()).unwrap_err(),
            want,
            "{what}:\n{out}"
        );
    }
}

/// Two equal divisions named after different source text keep their own names through the
/// simplifier, whose memo shares one rewrite between equal expressions.
#[test]
fn equal_divisions_of_different_source_keep_their_names_through_simplify() {
    use kiln_ir::Mutator;
    struct Name(Vec<&'static str>);
    impl Mutator for Name {
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            let e = kiln_ir::walk_mutate_expr(self, e);
            match e.node() {
                ExprNode::Binary { op: BinOp::Div, .. } => e.with_origin(self.0.remove(0).into()),
                _ => e,
            }
        }
    }
    let k = kernel(
        "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, p: ptr<global, u32>, d: u32) {
           let i: u32 = global_id(0);
           o[i] = (x[i] + 0u32) / d;
           p[i] = (x[i] + 0u32) / d;
         }",
    );
    let named = Name(vec!["`first`", "`second`"]).mutate_kernel(&k);
    let s = kiln_passes::simplify::simplify_kernel(&named);
    assert_eq!(
        divisions(&s),
        vec![
            ("x[i] / d".into(), Some("`first`".into())),
            ("x[i] / d".into(), Some("`second`".into())),
        ]
    );
}
