//! Collects the accesses of a buffer in one entry, in program order, each with its affine
//! index and the guard (path condition) under which it runs.

use kiln_ir::{Expr, ExprNode, Stmt, StmtNode};

use super::affine::{Aff, Cond, Ctx, Env, Path};

/// One access of the buffer.
#[derive(Clone, Debug)]
pub(super) struct Access {
    pub entry: usize,
    pub write: bool,
    /// The access as written in its kernel, e.g. `t[i + 1]`.
    pub text: String,
    pub aff: Result<Aff, String>,
    /// Where it runs.
    pub path: Path,
}

impl Access {
    /// A store that surely runs for every work-item and iteration its guard admits.
    pub fn definite(&self) -> bool {
        self.write && self.path.exact
    }
}

/// Collects the accesses of `names` in one entry, in program order.
pub(super) struct Collect<'a> {
    pub ctx: Ctx<'a>,
    pub names: &'a [String],
    pub entry: usize,
    pub out: Vec<Access>,
    /// Loops seen so far (each loop's number in [`Path::loops`]).
    pub loops: u32,
}

impl Collect<'_> {
    /// `path` inside a new loop.
    fn in_loop(&mut self, path: &Path) -> Path {
        let mut p = path.clone();
        p.loops.push(self.loops);
        self.loops += 1;
        p
    }

    fn access(&mut self, env: &Env, path: &Path, index: &Expr, write: bool, text: String) {
        let aff = self.ctx.affine(index, env, &path.guard);
        self.out.push(Access { entry: self.entry, write, text, aff, path: path.clone() });
    }

    fn vector(&mut self, path: &Path, write: bool, text: String) {
        // A promoted buffer is indexed one element at a time: a vector access keeps the
        // buffer in memory.
        let why = format!("`{text}` is a vector access");
        self.out.push(Access { entry: self.entry, write, text, aff: Err(why), path: path.clone() });
    }

    fn reads(&mut self, e: &Expr, env: &Env, path: &Path) {
        match e.node() {
            ExprNode::Load { buf, index } => {
                self.reads(index, env, path);
                if self.names.iter().any(|n| n == buf.name()) {
                    self.access(env, path, index, false, format!("{e}"));
                }
            }
            ExprNode::VecLoad { buf, index, .. } => {
                self.reads(index, env, path);
                if self.names.iter().any(|n| n == buf.name()) {
                    self.vector(path, false, format!("{e}"));
                }
            }
            _ => e.children().into_iter().for_each(|c| self.reads(c, env, path)),
        }
    }

    pub fn stmts(&mut self, ss: &[Stmt], env: &mut Env, path: &Path) {
        for s in ss {
            self.stmt(s, env, path);
        }
    }

    /// `path` narrowed by a condition.
    fn narrowed(path: &Path, c: Cond, text: String) -> Path {
        let mut p = path.clone();
        p.guard.extend(c.constraints);
        p.exact &= c.exact;
        p.conds.push(text);
        p
    }

    /// Walks `s`; bindings it makes stay in `env` (blocks restore their own).
    fn stmt(&mut self, s: &Stmt, env: &mut Env, path: &Path) {
        let opaque = |what: &str, name: &str| Err(format!("`{name}` is a {what}"));
        match s.node() {
            StmtNode::Let { var, value } => {
                self.reads(value, env, path);
                let name = var.name().to_string();
                env.bools.remove(&name);
                if var.ty().is_int() {
                    let a = self
                        .ctx
                        .affine(value, env, &path.guard)
                        .map_err(|why| format!("`{name}`: {why}"));
                    env.ints.insert(name, a);
                } else {
                    if var.ty().is_bool() {
                        let t = self.ctx.cond(value, env, &path.guard, true);
                        let f = self.ctx.cond(value, env, &path.guard, false);
                        env.bools.insert(name.clone(), (t, f));
                    }
                    env.ints.insert(name.clone(), opaque("non-integer value", &name));
                }
            }
            StmtNode::Decl { var, init } => {
                self.reads(init, env, path);
                env.bools.remove(var.name());
                env.ints.insert(var.name().to_string(), opaque("mutable variable", var.name()));
            }
            StmtNode::Assign { value, .. } => self.reads(value, env, path),
            StmtNode::Store { buf, index, value } => {
                self.reads(index, env, path);
                self.reads(value, env, path);
                if self.names.iter().any(|n| n == buf.name()) {
                    let text = format!("{}[{index}]", buf.name());
                    self.access(env, path, index, true, text);
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                self.reads(index, env, path);
                self.reads(value, env, path);
                if self.names.iter().any(|n| n == buf.name()) {
                    self.vector(path, true, format!("vstore({}, {index}, ..)", buf.name()));
                }
            }
            StmtNode::Alloc { var, .. } => {
                env.ints.insert(var.name().to_string(), opaque("array", var.name()));
            }
            StmtNode::If { cond, then, otherwise } => {
                self.reads(cond, env, path);
                let t = self.ctx.cond(cond, env, &path.guard, true);
                self.stmt(then, &mut env.clone(), &Self::narrowed(path, t, format!("{cond}")));
                if let Some(o) = otherwise {
                    let f = self.ctx.cond(cond, env, &path.guard, false);
                    let p = Self::narrowed(path, f, format!("!({cond})"));
                    self.stmt(o, &mut env.clone(), &p);
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                for x in [lo, hi, step] {
                    self.reads(x, env, path);
                }
                let mut inner = env.clone();
                inner.bools.remove(var.name());
                let mut p = self.in_loop(path);
                match self.ctx.loop_var((lo, hi, step), env, &path.guard) {
                    Ok(a) => {
                        inner.depth += 1;
                        inner.ints.insert(var.name().to_string(), Ok(a));
                    }
                    Err(why) => {
                        // An uncounted loop may run no iteration: nothing in it surely runs.
                        p.exact = false;
                        let why = format!("`{}` is a loop variable ({why})", var.name());
                        inner.ints.insert(var.name().to_string(), Err(why));
                    }
                }
                self.stmt(body, &mut inner, &p);
            }
            StmtNode::While { cond, body } => {
                let inner = env.clone();
                let p = Path { exact: false, ..self.in_loop(path) };
                self.reads(cond, &inner, &p);
                self.stmt(body, &mut inner.clone(), &p);
            }
            StmtNode::Block(ss) => self.stmts(ss, &mut env.clone(), path),
            StmtNode::Call { result, args, .. } => {
                args.iter().for_each(|a| self.reads(a, env, path));
                if let Some(r) = result {
                    env.bools.remove(r.name());
                    env.ints.insert(r.name().to_string(), opaque("call result", r.name()));
                }
            }
        }
    }
}
