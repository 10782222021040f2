//! Builds an expression and stops in `built` so a debugger can print it with `dump()`:
//!
//! ```text
//! cargo build --example dump_demo --config profile.dev.package.kiln.debug=2 \
//!     --config profile.dev.package.kiln-ir.debug=2
//! gdb -batch -ex 'break dump_demo::built' -ex run -ex up -ex 'call e.dump()' \
//!     target/debug/examples/dump_demo
//! ```
//!
//! The `--config`s give full debug info: the dev profile's limited debug info has no local
//! variables (so gdb cannot find `e`) and no parameter lists (so `e.dump()` cannot be called as
//! a method; with full debug info for the example only, `call kiln_ir::expr::Expr::dump(&e)`
//! works).
//! `tests/gdb_dump.rs` runs this and checks gdb's output.

use kiln::ir::{Expr, Type, Var};

/// Called once the expression is built; a place for a breakpoint.
#[inline(never)]
fn built(e: &Expr) {
    std::hint::black_box(e);
}

fn main() {
    // Keep `Expr::dump` in the binary: the linker drops functions nothing refers to, and a
    // debugger can only call what is there.
    std::hint::black_box(Expr::dump as fn(&Expr));
    let a = Var::new("a", Type::I32);
    let b = Var::new("b", Type::I32);
    let e = 2 * (&a + &b) - a.expr();
    built(&e);
    println!("built {e}");
}
