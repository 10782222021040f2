//! Names in nested scopes, for walks that resolve each reference as they go (the verifier,
//! backends' lowering).

use std::sync::Arc;

use hashbrown::HashMap;

/// What each name in scope means now, in nested scopes: a binding in an inner scope replaces
/// an outer one until that scope ends. A lookup costs one hash however deep the nesting
/// (one map per scope cost one per enclosing scope, and unrolled kernels nest deeply).
#[derive(Debug)]
pub struct Scopes<V> {
    live: HashMap<Arc<str>, V>,
    /// Each binding made, with what it replaced (`None`: the name was unbound).
    undo: Vec<(Arc<str>, Option<V>)>,
    /// Where each open scope's bindings start in `undo`.
    marks: Vec<usize>,
    /// Bumped whenever what a name means may have changed (see [`Scopes::changes`]).
    changes: u64,
}

impl<V> Default for Scopes<V> {
    fn default() -> Scopes<V> {
        Scopes { live: HashMap::new(), undo: Vec::new(), marks: Vec::new(), changes: 0 }
    }
}

impl<V> Scopes<V> {
    /// Opens a scope: bindings made from now on last until the matching [`Scopes::pop`].
    pub fn push(&mut self) {
        self.marks.push(self.undo.len());
    }

    /// Closes the innermost scope: each name it bound means again what it meant before.
    /// Without an open scope, every binding is undone.
    pub fn pop(&mut self) {
        let mark = self.marks.pop().unwrap_or(0);
        if self.undo.len() > mark {
            self.changes += 1;
        }
        while self.undo.len() > mark {
            let Some((name, prev)) = self.undo.pop() else { break };
            match prev {
                Some(v) => self.live.insert(name, v),
                None => self.live.remove(&name),
            };
        }
    }

    /// A number that stays the same while every bound name means what it meant: a caller
    /// may keep what [`Scopes::get`] answered for a bound name until this changes. Binding a
    /// name that was unbound does not change it (no bound name's meaning moves), so a long
    /// block of `let`s keeps such answers valid.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// What `name` means now, if it is bound.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.live.get(name)
    }

    /// Binds `name` to `value` in the innermost scope.
    pub fn bind(&mut self, name: &str, value: V) {
        self.bind_shared(&Arc::from(name), value);
    }

    /// [`Scopes::bind`] of a name already shared (a [`crate::Var`]'s): the handle is kept,
    /// where `bind` copies the text into an allocation of its own (one per binding made).
    pub fn bind_shared(&mut self, name: &Arc<str>, value: V) {
        let name = name.clone();
        let prev = self.live.insert(name.clone(), value);
        if prev.is_some() {
            self.changes += 1;
        }
        self.undo.push((name, prev));
    }
}

#[cfg(test)]
mod tests {
    use super::Scopes;

    #[test]
    fn an_inner_binding_lasts_until_its_scope_ends() {
        let mut s = Scopes::default();
        s.bind("x", 1);
        s.push();
        s.bind("x", 2);
        s.bind("y", 3);
        s.bind("x", 4);
        assert_eq!((s.get("x"), s.get("y")), (Some(&4), Some(&3)));
        s.pop();
        assert_eq!((s.get("x"), s.get("y")), (Some(&1), None));
        s.pop();
        assert_eq!(s.get("x"), None);
    }

    #[test]
    fn changes_count_what_may_change_a_meaning() {
        let mut s = Scopes::default();
        let c0 = s.changes();
        s.push();
        assert_eq!(s.changes(), c0, "an empty scope changes nothing");
        s.pop();
        assert_eq!(s.changes(), c0);
        s.bind("x", 1);
        let c1 = s.changes();
        assert_eq!(c1, c0, "no bound name changed its meaning");
        s.push();
        s.bind("y", 2);
        let c2 = s.changes();
        assert_eq!(c2, c1);
        s.bind("x", 3);
        let c3 = s.changes();
        assert_ne!(c3, c2, "`x` means something else");
        s.pop();
        assert_ne!(s.changes(), c3, "`y` is unbound again, `x` back to 1");
    }
}
