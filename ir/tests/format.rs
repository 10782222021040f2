//! `format_source` (what `kiln fmt` prints): canonical layout that keeps every comment and
//! single empty lines, is a fixed point, and parses back to the same module.

use kiln_ir::parse_file;
use kiln_ir::print::format_source;

fn fmt(src: &str) -> String {
    let parsed = parse_file("t.kir", src).unwrap_or_else(|d| panic!("{d}"));
    format_source(&parsed, src)
}

/// Every comment survives, formatting is a fixed point, and the module is unchanged.
fn check(src: &str) -> String {
    let out = fmt(src);
    assert_eq!(fmt(&out), out, "not a fixed point:\n{out}");
    let before = parse_file("t.kir", src).unwrap().module;
    let after = parse_file("t.kir", &out).unwrap().module;
    assert!(before.is_equal(&after), "formatting changed the module:\n{out}");
    let comments = |s: &str| -> Vec<String> {
        s.lines().filter_map(|l| l.find("//").map(|i| l[i..].trim_end().to_string())).collect()
    };
    assert_eq!(comments(src), comments(&out), "comments lost or reordered:\n{out}");
    out
}

#[test]
fn comments_in_every_position_survive() {
    let src = "// header comment
// second line

kernel a(x: ptr<global, f32>, n: u32) { // after the brace
  let i = global_id(0); // trailing
  // before an if
  if i < n {
    x[i] = x[i]*2.0;


    // after an empty line (kept, once)
  } else { // else comment
  }
  while false { /* a block comment */ }
  {
    // only a comment
  }
  // last in the kernel
} // after the kernel

/* between kernels */
kernel b() {}
// at the end of the file
";
    let out = check(src);
    assert_eq!(
        out,
        "// header comment
// second line

kernel a(x: ptr<global, f32>, n: u32) { // after the brace
  let i: u32 = global_id(0); // trailing
  // before an if
  if i < n {
    x[i] = x[i] * 2.0;

    // after an empty line (kept, once)
  } else { // else comment
  }
  while false { /* a block comment */
  }
  {
    // only a comment
  }
  // last in the kernel
} // after the kernel

/* between kernels */
kernel b() {}
// at the end of the file
"
    );
}

#[test]
fn empty_lines_between_statements_are_kept_once() {
    let src = "kernel k(x: ptr<global, u32>) {\n  x[0] = 1;\n\n\n\n  x[1] = 2;\n  x[2] = 3;\n}\n";
    assert_eq!(
        check(src),
        "kernel k(x: ptr<global, u32>) {\n  x[0] = 1;\n\n  x[1] = 2;\n  x[2] = 3;\n}\n"
    );
}

#[test]
fn without_comments_it_is_the_display_form() {
    let src = "kernel k(x: ptr<global, u32>) { for i: u32 in 0 .. 4 step 1 { x[i] = i; } }\nkernel j() {}";
    let parsed = parse_file("t.kir", src).unwrap();
    assert_eq!(format_source(&parsed, src), parsed.module.to_string());
}

#[cfg(feature = "testing")]
mod random {
    use super::check;
    use kiln_ir::testing::arb_kernel;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Comments sprinkled over random kernels: at line ends, on lines of their own, and
        /// empty lines; all survive and formatting is stable.
        #[test]
        fn sprinkled_comments_survive(case in arb_kernel(), marks in proptest::collection::vec(0u8..6, 0..400)) {
            let text = case.kernel.to_string();
            let mut src = String::new();
            for (n, line) in text.lines().enumerate() {
                match marks.get(n).copied().unwrap_or(0) {
                    1 => src.push_str(&format!("// before line {n}\n")),
                    2 => src.push('\n'),
                    _ => {}
                }
                src.push_str(line);
                if marks.get(n).copied() == Some(3) {
                    src.push_str(&format!(" // after line {n}"));
                }
                src.push('\n');
            }
            check(&src);
        }
    }
}
