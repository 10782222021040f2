use super::*;

const SAXPY: &str = "kernel saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32) {
  let i = global_id(0);              // let: immutable, scoped to the rest of the block
  if i < n {
    y[i] = a * x[i] + y[i];          // store / load by element index
  }
}
kernel reduce(x: ptr<global, f32>, out: ptr<global, f32>) #reqd_work_group_size(64, 1, 1) {
  local tile: f32[64];               // work-group shared array
  var acc: f32 = 0.0;                // mutable local
  for k: u32 in 0 .. 4 step 1 { acc = acc + x[global_id(0) * 4u32 + k]; }
  tile[local_id(0)] = acc;
  barrier(local);
  if local_id(0) == 0u32 { var s: f32 = 0.0; for j: u32 in 0 .. 64 { s = s + tile[j]; } out[group_id(0)] = s; }
}
";

fn round_trip(src: &str) -> Module {
    let m = parse_module(src).unwrap_or_else(|d| panic!("{d}"));
    let printed = m.to_string();
    let again = parse_module(&printed).unwrap_or_else(|d| panic!("{d}\n{printed}"));
    assert!(again.is_equal(&m), "round trip changed the module:\n{printed}\n---\n{again}");
    assert_eq!(again.to_string(), printed, "printing is not a fixed point");
    m
}

#[test]
fn issue_examples_round_trip() {
    let m = round_trip(SAXPY);
    assert_eq!(m.kernels.len(), 2);
    assert_eq!(
        m.kernels[0].to_string(),
        "kernel saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    y[i] = a * x[i] + y[i];
  }
}"
    );
    assert_eq!(m.kernels[1].attrs().reqd_work_group_size, Some([64, 1, 1]));
}

#[test]
fn literals_take_their_type_from_context() {
    let m = round_trip(
        "kernel k(p: ptr<global, u8>, q: ptr<global, f64>, n: i64) {
           let a: u64 = 1 + 2;
           let b = n * 3;
           let c = 2 * n;
           let d = 1.5;
           let e = 7;
           p[0] = 255;
           q[1] = 2;
           let f = n < 4;
           let g = select(f, 1u16, 2);
           let h = -(3) as u8;
           let z = -0.0f64;
         }",
    );
    let text = m.to_string();
    for want in [
        "let a: u64 = 1 + 2;",
        "let b: i64 = n * 3;",
        "let c: i64 = 2 * n;",
        "let d: f32 = 1.5;",
        "let e: i32 = 7;",
        "p[0] = 255;",
        "q[1] = 2.0;",
        "let g: u16 = f ? 1 : 2;",
        "let h: u8 = -(3) as u8;",
        "let z: f64 = -0.0;",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
}

#[test]
fn statements_of_every_kind_round_trip() {
    round_trip(
        "kernel all(p: ptr<global, i32>, c: ptr<global, u32>, h: ptr<global, f16>, w: ptr<constant, f32>) #fast_math {
           private tmp: i32[4];
           local buf: u32[8];
           var acc: i32 = 0;
           for i: i32 in -2 .. 10 step 3 {
             acc = acc + i;
             if acc > 5 { acc = acc - 1; } else if acc < -3 { acc = 0; } else { tmp[1] = acc; }
           }
           while acc > 0 { acc = acc >> 1; }
           { let inner = ~acc ^ 0x7fffffff; p[0] = inner % 3; }
           let old = atomic_add(c, 0, 1);
           let prev: u32 = atomic_cmpxchg(c, 1, old, 5);
           atomic_max(p, 2, -4);
           barrier(local, global);
           fence(global);
           h[0] = (w[0] * 2.0) as f16;
           p[1] = abs(min(acc, 3)) + max(-1, acc) as i32;
           let fl = fma(w[1], 2.0, sqrt(w[2])) + floor(1.5) - ceil(w[0]) * trunc(-2.5);
           let ids = global_id(0) + local_id(1) + group_id(2) + global_size(0) + local_size(1) + num_groups(2) + global_offset(0);
           let b = true && !(false || fl != fl) & (ids == 3u32);
           let s = b ? 1e-7 : inf;
           let nn = nan;
           let big = 18446744073709551615u64 >> 63u64 << 2u64;
         }",
    );
}

#[test]
fn api_built_expressions_print_and_reparse() {
    let a = Var::new("a", Type::I32);
    let b = Var::new("b", Type::I32);
    let e = 2 * (&a + &b) - a.expr();
    assert_eq!(e.to_string(), "2 * (a + b) - a");
    let back = parse_expr(&e.to_string(), &[a.clone(), b.clone()]).unwrap();
    assert!(back.is_equal(&e));
    // Literals whose types no context gives back keep their suffixes.
    let odd = Expr::binary(BinOp::Add, Expr::u64(1), Expr::u64(2)).cast(Scalar::I8);
    assert_eq!(odd.to_string(), "(1u64 + 2u64) as i8");
    assert!(parse_expr(&odd.to_string(), &[]).unwrap().is_equal(&odd));
    let neg_lit = -Expr::i32(5);
    assert!(parse_expr(&neg_lit.to_string(), &[]).unwrap().is_equal(&neg_lit));
    // f32 0x7fc00001 widened exactly (an `as f64` of a NaN may lose its payload once the
    // optimizer folds it).
    let nan = Expr::float(Scalar::F32, f64::from_bits(0x7ff8_0000_2000_0000));
    assert_eq!(nan.to_string(), "nanf32(0x7fc00001)");
    assert!(parse_expr(&nan.to_string(), &[]).unwrap().is_equal(&nan));
}

#[test]
fn ill_typed_ir_still_round_trips() {
    // The verifier rejects these, but dump() output must still read back faithfully.
    let x = Var::new("x", Type::U32);
    for e in [
        Expr::binary(BinOp::Add, x.expr(), Expr::i32(1)),
        Expr::binary(BinOp::Add, Expr::i32(1), x.expr()),
        Expr::binary(BinOp::Add, Expr::i32(1), Expr::int(Scalar::U8, 2)),
        Expr::binary(BinOp::Lt, Expr::f64(1.0), Expr::i32(1)),
        Expr::select(Expr::i32(1), Expr::u32(1), Expr::f32(2.0)),
        Expr::intrinsic(Intrinsic::Min, [Expr::int(Scalar::U8, 1), x.expr(), Expr::u32(2)]),
        Expr::intrinsic(Intrinsic::Max, [Expr::i32(1), Expr::f64(2.0)]).cmp_lt(Expr::f32(0.5)),
    ] {
        let back =
            parse_expr(&e.to_string(), std::slice::from_ref(&x)).unwrap_or_else(|d| panic!("{d}"));
        assert!(back.is_equal(&e), "{e} read back as {back}");
    }
}

fn error_at(src: &str) -> (usize, usize, String) {
    match parse_file("t.kir", src) {
        Ok(_) => panic!("expected an error for {src:?}"),
        Err(d) => (d.line, d.col, d.message),
    }
}

#[test]
fn errors_are_located() {
    let (l, c, m) = error_at("kernel k() {\n  let x = ;\n}");
    assert_eq!((l, c), (2, 11), "{m}");
    let (l, c, m) = error_at("kernel k(n: u32) {\n  let x = n + 300u8 + y;\n}");
    assert_eq!((l, c), (2, 15), "{m}");
    assert!(m.contains("out of range for u8"), "{m}");
    let (_, _, m) = error_at("kernel k(n: u32) { let x = n + y; }");
    assert!(m.contains("unknown variable `y`"), "{m}");
    let (_, _, m) = error_at("kernel k(n: ptr<bogus, f32>) {}");
    assert!(m.contains("unknown address space `bogus`"), "{m}");
    let (_, _, m) = error_at("kernel k() { let v = atomic_add(p, 0, 1) + 1; }");
    assert!(m.contains("unknown variable `p`"), "{m}");
    let (_, _, m) = error_at("kernel k(p: ptr<global, u32>) { let v = 1 + atomic_add(p, 0, 1); }");
    assert!(m.contains("side effects"), "{m}");
    let (_, _, m) = error_at("kernel k() { let x = global_id(n); }");
    assert!(m.contains("integer literal 0, 1 or 2"), "{m}");
    let (_, _, m) = error_at("kernel k() {");
    assert!(m.contains("never closed"), "{m}");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("kernel k() {{ let x = {}1{}; }}", "(".repeat(5000), ")".repeat(5000));
    assert!(error_at(&deep).2.contains("too deep"));
    let blocks = format!("kernel k() {{ {} {} }}", "{".repeat(5000), "}".repeat(5000));
    assert!(error_at(&blocks).2.contains("too deep"));
    let negs = format!("kernel k(x: i32) {{ let y = {}x; }}", "-".repeat(5000));
    assert!(error_at(&negs).2.contains("too deep"));
}

/// Issue 12, item 4: a flat left-associative chain is one nesting level, however long; only
/// real nesting counts against MAX_DEPTH.
#[test]
fn flat_sum_of_257_terms_is_not_nested_too_deeply() {
    for n in [257, 100_000] {
        let src = format!("kernel k(x: i32) {{ let y = x{}; }}", " + 1".repeat(n - 1));
        let m = parse_module(&src).unwrap_or_else(|d| panic!("{n} terms: {d}"));
        let StmtNode::Block(b) = m.kernels[0].body().node() else { panic!() };
        let StmtNode::Let { value, .. } = b[0].node() else { panic!() };
        assert_eq!(value.depth(), n, "a left-deep chain of {n} terms");
        assert_eq!(value.ty(), Type::I32);
    }
    // Mixed precedences and comparisons in one flat chain type as nested binaries would.
    let x = Var::new("x", Type::U8);
    let e = parse_expr("x + 1 * 2 - 3 < 4 == true", std::slice::from_ref(&x)).unwrap();
    let back = parse_expr(&e.to_string(), std::slice::from_ref(&x)).unwrap();
    assert!(back.is_equal(&e), "{e} read back as {back}");
    use crate::expr::ExprNode;
    let ExprNode::Binary { a: cmp, .. } = e.node() else { panic!() };
    let ExprNode::Binary { b: four, .. } = cmp.node() else { panic!() };
    assert_eq!(four.ty(), Type::U8, "the literal takes the type of the chain it is compared to");
}

/// Issue 12, item 4: absurd nesting (100,000 parentheses) is a located error, not a stack
/// overflow, on a 2 MiB thread.
#[test]
fn hundred_thousand_parentheses_is_a_located_error() {
    let run = || {
        let src =
            format!("kernel k() {{\n  let x = {}1{}; }}", "(".repeat(100_000), ")".repeat(100_000));
        let (line, col, msg) = error_at(&src);
        assert_eq!(line, 2, "{msg}");
        assert!(col > 256, "{col}: {msg}");
        assert!(msg.contains("too deep") && msg.contains("256"), "{msg}");
    };
    std::thread::Builder::new().stack_size(2 << 20).spawn(run).unwrap().join().unwrap();
}

#[test]
fn no_panics_on_truncations_of_valid_text() {
    for end in 0..SAXPY.len() {
        if SAXPY.is_char_boundary(end) {
            let _ = parse_file("t.kir", &SAXPY[..end]);
        }
    }
}

mod soup {
    use super::*;
    use proptest::prelude::*;

    const WORDS: &[&str] = &[
        "kernel",
        "k",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "x",
        ":",
        "ptr",
        "<",
        ">",
        "global",
        ",",
        "f32",
        "u32",
        "let",
        "var",
        "=",
        ";",
        "if",
        "else",
        "for",
        "in",
        "..",
        "step",
        "while",
        "local",
        "private",
        "barrier",
        "atomic_add",
        "global_id",
        "0",
        "1",
        "-",
        "+",
        "*",
        "/",
        "?",
        "as",
        "nan",
        "nanf32",
        "(0x7fc00001)",
        "inf",
        "1.5",
        "3u8",
        "300u8",
        "0xff",
        "#",
        "reqd_work_group_size",
        "fast_math",
        "min",
        "select",
        "!",
        "~",
        "&&",
        "<<",
        "//",
        "\n",
        "true",
        "-0.0",
        "1e999",
        "99999999999999999999999999999999999999999",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Arbitrary token sequences never panic the parser, and whatever parses prints to
        /// text that parses back equal.
        #[test]
        fn token_soup_never_panics(words in proptest::collection::vec(0..WORDS.len(), 0..60)) {
            let src: Vec<&str> = words.iter().map(|&i| WORDS[i]).collect();
            let src = src.join(" ");
            if let Ok(m) = parse_module(&src) {
                let printed = m.to_string();
                let again = parse_module(&printed);
                prop_assert!(again.as_ref().is_ok_and(|a| a.is_equal(&m)), "{src}\n=> {printed}");
            }
        }

        /// Kernel headers with random bodies drawn from statement fragments.
        #[test]
        fn statement_soup_never_panics(words in proptest::collection::vec(0..WORDS.len(), 0..40)) {
            let body: Vec<&str> = words.iter().map(|&i| WORDS[i]).collect();
            let src = format!("kernel k(x: ptr<global, f32>, n: u32) {{ {} }}", body.join(" "));
            if let Ok(m) = parse_module(&src) {
                let printed = m.to_string();
                prop_assert!(parse_module(&printed).is_ok_and(|a| a.is_equal(&m)), "{src}\n=> {printed}");
            }
        }
    }
}

#[test]
fn fusion_attributes_round_trip() {
    let m = round_trip(
        "kernel fused(add_a: ptr<global, f32>, add_b: ptr<global, f32>) #reqd_work_group_size(8, 1, 1)
           #nd_range(global = [64, 2], local = [8, 1], offset = [1, 0])
           #fused(kernels = [add, mul, add], args = [[param(0), param(1), promoted(private, 1)],
             [promoted(local, 16), const(f32, 0x40200000), const(i8, -3), const(bool, 1)],
             [identical(0), const(u64, 18446744073709551615), const(f64, 0x7ff8000000000001)]]) {
           add_a[0] = add_b[0];
         }
         kernel g(x: ptr<global, f32>) #nd_range(global = [4], offset = [0]) #fused(kernels = [], args = []) { }",
    );
    let a = m.kernels[0].attrs();
    let r = a.nd_range.as_ref().unwrap();
    assert_eq!(
        (r.global.clone(), r.local.clone(), r.offset.clone()),
        (vec![64, 2], Some(vec![8, 1]), vec![1, 0])
    );
    let f = a.fused.as_ref().unwrap();
    assert_eq!(f.kernels, ["add", "mul", "add"]);
    assert_eq!(f.args[1][1], crate::FusedArg::Const(crate::Imm::float(Scalar::F32, 2.5)));
    assert_eq!(f.args[1][2], crate::FusedArg::Const(crate::Imm::int(Scalar::I8, -3)));
    assert_eq!(f.args[2][0], crate::FusedArg::Identical(0));
    assert_eq!(m.kernels[1].attrs().nd_range.as_ref().unwrap().local, None);
}

#[test]
fn fusion_attribute_errors() {
    for (src, msg) in [
        ("#nd_range(global = [1, 2], offset = [0])", "one entry per dimension"),
        ("#nd_range(global = [], offset = [])", "1 to 3 entries"),
        ("#nd_range(offset = [0])", "expected `global`"),
        ("#fused(kernels = [a], args = [])", "one argument list per kernel"),
        ("#fused(kernels = [a], args = [[bogus(1)]])", "unknown fused argument kind"),
        ("#fused(kernels = [a], args = [[const(q32, 1)]])", "unknown scalar type"),
        ("#fused(kernels = [a], args = [[promoted(global, 1)]])", "unknown memory"),
    ] {
        let e = parse_module(&format!("kernel k() {src} {{ }}")).unwrap_err();
        assert!(e.to_string().contains(msg), "{src}: {e}");
    }
}
