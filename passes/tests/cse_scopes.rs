//! CSE's bindings follow the blocks they are made in: a value bound in a nested block is
//! reused there and nowhere after it closes, an outer binding of the same value is reused
//! again once the inner block is left, and the innermost binding wins while both are open.

use kiln_ir::{parse_module, verify_kernel, Kernel};

fn kernel(src: &str) -> Kernel {
    parse_module(src).expect("parses").kernels.remove(0)
}

fn cse(src: &str) -> String {
    let out = kiln_passes::cse::cse(&kernel(src));
    assert!(verify_kernel(&out).is_ok(), "CSE output verifies:\n{out}");
    out.to_string()
}

#[test]
fn a_nested_binding_is_not_reused_after_its_block() {
    let out = cse("kernel k(y: ptr<global, u32>, x: u32) {
  {
    let a: u32 = x * 3 + 1;
    y[0] = x * 3 + 1;
  }
  let b: u32 = x * 3 + 1;
  y[1] = x * 3 + 1;
}");
    assert!(out.contains("y[0] = a;"), "{out}");
    assert!(out.contains("let b: u32 = x * 3 + 1;"), "{out}");
    assert!(out.contains("y[1] = b;"), "{out}");
}

#[test]
fn an_outer_binding_is_reused_again_after_an_inner_one() {
    let out = cse("kernel k(y: ptr<global, u32>, x: u32) {
  let a: u32 = x * 3 + 1;
  {
    let b: u32 = x * 5 + 2;
    y[0] = x * 5 + 2;
    y[1] = x * 3 + 1;
  }
  y[2] = x * 3 + 1;
  y[3] = x * 5 + 2;
}");
    assert!(out.contains("y[0] = b;"), "{out}");
    assert!(out.contains("y[1] = a;"), "{out}");
    assert!(out.contains("y[2] = a;"), "{out}");
    // `b` is gone with its block: the last store cannot read it.
    assert!(!out.contains("y[3] = b;"), "{out}");
}
