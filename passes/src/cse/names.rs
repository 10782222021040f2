//! The names a fresh `cseN` binding must not take.

use hashbrown::HashSet;
use kiln_ir::{Expr, Kernel, Stmt, Var};

/// The names in [`crate::util::all_names`] of `k` that start with `cse`: the only ones the
/// repeats half's search for a fresh `cseN` asks about, found without a `String` for every
/// other name.
pub(super) fn cse_names(k: &Kernel) -> HashSet<String> {
    struct Names(HashSet<String>);
    impl Names {
        fn add(&mut self, v: &Var) {
            if v.name().starts_with("cse") && !self.0.contains(v.name()) {
                self.0.insert(v.name().to_string());
            }
        }
    }
    impl kiln_ir::Visitor for Names {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            // The statements `all_names` takes a name from.
            if let Some(var) = crate::util::named_var(s) {
                self.add(var);
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut n = Names(HashSet::new());
    for p in k.params() {
        n.add(p);
    }
    kiln_ir::Visitor::visit_stmt(&mut n, k.body());
    n.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`cse_names`] is [`crate::util::all_names`] less the names that do not start with
    /// `cse`, on kernels with such names bound in every way a name is, and so is what the
    /// let-based half lists for the repeats half.
    #[test]
    fn cse_names_are_all_names_starting_with_cse() {
        let src = "kernel k(cse_p: ptr<global, f32>, n: i32) {
  let cse0: i32 = n + 1;
  var csex: i32 = 0;
  for cse3: i32 in 0 .. n {
    csex = csex + cse3;
    cse_p[cse3] = 1.0;
  }
  let x: i32 = cse0 * 2;
  cse_p[x] = 2.0;
}";
        let m = kiln_ir::parse_module(src).expect("parses");
        for k in &m.kernels {
            let want: HashSet<String> =
                crate::util::all_names(k).into_iter().filter(|n| n.starts_with("cse")).collect();
            assert_eq!(cse_names(k), want);
            assert_eq!(want.len(), 4, "{want:?}");
            // The let-based half's listing (the walk of the body that sizes its table, and
            // the parameters) names the same, each at least once.
            let listed: HashSet<String> =
                super::super::Cse::new(k).taken.iter().map(|n| n.to_string()).collect();
            assert_eq!(listed, want);
        }
    }
}
