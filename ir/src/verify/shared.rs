//! Statements met again: an unrolled loop is one block per iteration, each holding the same
//! statement handles (`{ let i = 0; body }`, `{ let i = 1; body }`, ...), so a generated
//! GEMM's thousand accumulator updates are eight copies of 128 statements.
//!
//! The checks [`Checker::once`] is given (a `let`'s or `var`'s value against its type, an
//! assignment, a store) read nothing but the statement's own tree and, through
//! [`Checker::lookup`], what the names it refers to are bound to: the same statement with
//! every lookup answered alike reports what it reported before. So a statement that occurs
//! more than once ([`Stmt::is_shared`]) and was checked without an error keeps the lookups
//! its check made, in order, with their answers; where it is met again and each answers the
//! same now, it is clean again without walking its expressions. Where one differs (a name
//! bound again to another type or kind), it is checked in full.

use super::Checker;
use crate::stmt::Stmt;

impl Checker<'_> {
    /// Runs `check`, a check of `s` that binds nothing and reads no state but through
    /// [`Checker::lookup`], unless `s` was checked clean before and every lookup that check
    /// made answers the same now (see the module docs).
    pub(super) fn once(&mut self, s: &Stmt, check: impl FnOnce(&mut Self)) {
        if !s.is_shared() || self.recording.is_some() {
            return check(self);
        }
        let known = self.seen.get(&s.addr()).copied();
        if let Some(i) = known {
            let looked = std::mem::take(&mut self.seen_lookups[i].1);
            let same = looked.iter().all(|(v, b)| self.lookup(v) == *b);
            self.seen_lookups[i].1 = looked;
            if same {
                return;
            }
        }
        let errors = self.errors.len();
        self.recording = Some(Vec::new());
        check(self);
        let looked = self.recording.take().unwrap_or_default();
        if self.errors.len() != errors {
            return;
        }
        match known {
            Some(i) => self.seen_lookups[i].1 = looked,
            None => {
                self.seen.insert(s.addr(), self.seen_lookups.len());
                self.seen_lookups.push((s.clone(), looked));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{verify_kernel, Expr, Kernel, Scalar, Stmt, Type, Var};

    fn messages(k: &Kernel) -> Vec<String> {
        verify_kernel(k).err().unwrap_or_default().into_iter().map(|e| e.message).collect()
    }

    /// Checks `s` in one block per binding of `bindings` (`{ b; s }`, after `var y: i32`),
    /// once with every block holding the same handle of `s`, as an unrolled loop's copies
    /// do, and once with a copy of its own each: the errors must be the same. Returns them.
    fn same_errors(bindings: &[Stmt], s: impl Fn() -> Stmt) -> Vec<String> {
        let y = Var::new("y", Type::I32);
        let kernel = |each: &dyn Fn() -> Stmt| {
            let mut body = vec![Stmt::decl(&y, Expr::from(0))];
            body.extend(bindings.iter().map(|b| Stmt::block([b.clone(), each()])));
            Kernel::new("k", vec![], Stmt::block(body))
        };
        let one = s();
        let shared = messages(&kernel(&|| one.clone()));
        assert_eq!(shared, messages(&kernel(&s)));
        shared
    }

    fn x(ty: Type) -> Var {
        Var::new("x", ty)
    }

    fn let_x(ty: Type, v: Expr) -> Stmt {
        Stmt::let_(&x(ty), v)
    }

    /// A shared statement is clean again where its names mean the same, and checked again
    /// (with the errors an unshared copy gets) where one means something else: another
    /// type, another kind, or nothing.
    #[test]
    fn shared_statements_report_what_copies_report() {
        let i32x = || let_x(Type::I32, Expr::from(1));
        let i64x = || let_x(Type::I64, Expr::int(Scalar::I64, 1));
        let read = || Stmt::assign(&Var::new("y", Type::I32), x(Type::I32).expr() + 1);
        let bind = || Stmt::let_(&Var::new("z", Type::I32), x(Type::I32).expr() * 2);
        let store = || Stmt::assign(&x(Type::I32), Expr::from(3));
        let none = Stmt::block([]);
        for s in [&read as &dyn Fn() -> Stmt, &bind] {
            assert!(same_errors(&[i32x(), i32x(), i32x()], s).is_empty());
            assert_eq!(same_errors(&[i32x(), i64x(), i32x()], s).len(), 1);
            assert_eq!(same_errors(&[i32x(), none.clone()], s).len(), 1);
            assert_eq!(same_errors(&[i64x(), i64x()], s).len(), 2, "an error in each copy");
        }
        let var_x = || Stmt::decl(&x(Type::I32), Expr::from(0));
        assert!(same_errors(&[var_x(), var_x()], store).is_empty());
        assert_eq!(same_errors(&[var_x(), i32x(), var_x()], store).len(), 1, "a `let` now");
    }
}
