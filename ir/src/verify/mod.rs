//! The verifier: kiln's type system, scoping and address-space rules.
//!
//! [`verify_kernel`] and [`verify_module`] check IR however it was built (parsed, generated,
//! rewritten by a pass, or assembled through the builders), report *every* error they find in
//! source order, and never panic, whatever the input. Each [`VerifyError`] names the kernel,
//! says what is wrong in words (printing the offending construct) and carries the innermost
//! offending [`Expr`] or [`Stmt`] handle, which [`crate::check`] maps back to a source
//! location.
//!
//! # Types
//!
//! *Arithmetic* types are the integers `i8 i16 i32 i64 u8 u16 u32 u64` and `f32`, `f64`.
//! `bool` is a truth value that cannot live in memory. `f16` is a **storage type**: an f16
//! value can be loaded, stored, cast (to or from any scalar), written as a literal, bound by
//! `let`/`var` and assigned, but no operator, comparison (not even `==`), `select` or
//! intrinsic accepts it, and it cannot be a loop counter or an atomic's element. Convert with
//! `as f32` first. There are no implicit conversions anywhere: every rule below that says
//! "same type" means exactly the same type.
//!
//! # Expressions
//!
//! | construct | operands | result |
//! |---|---|---|
//! | `a + b`, `a - b`, `a * b`, `a / b` | same arithmetic type | that type |
//! | `a % b` | same integer type | that type |
//! | `a & b`, `a \| b`, `a ^ b` | same type, integer or `bool` | that type |
//! | `a << b`, `a >> b` | same integer type | that type |
//! | `a == b`, `a != b` | same scalar type, not f16 | `bool` |
//! | `a < b`, `a <= b`, `a > b`, `a >= b` | same arithmetic type | `bool` |
//! | `a && b`, `a \|\| b` | `bool` | `bool` |
//! | `-a` | arithmetic | same |
//! | `!a` | `bool` | `bool` |
//! | `~a` | integer | same |
//! | `c ? a : b`, `select(c, a, b)` | `c` bool; `a`, `b` same scalar type, not f16 | that type |
//! | `a as T` | any scalar `a` (no pointers), any scalar `T` | `T` |
//! | `p[i]` | `p` a pointer variable in scope, `i` any integer type | the element type |
//! | `global_id(d)` and the other built-ins | `d` in 0..=2 | `u32` |
//! | `min`, `max` (2 args), `abs` (1 arg) | all arguments the same arithmetic type | that type |
//! | `fma` (3 args), `sqrt floor ceil trunc exp log sin cos` (1 arg) | same type, f32 or f64 | that type |
//!
//! A variable reference must name a binding in scope, with the binding's type (a [`Var`]
//! carries a name and a type; a reference whose type differs from its binding's is an error).
//! Immediates must be well formed (an `Imm::Int` of an integer type, an `Imm::Float` of a
//! float type). Values that are known only at run time (a zero divisor, a non-positive loop
//! step, an out-of-bounds index) are the interpreter's business, never the verifier's, so
//! that constant propagation cannot turn a verified kernel into one that fails to verify.
//!
//! # Statements
//!
//! * `let x: T = v;` and `var x: T = v;` — `T` is the type of `v` and a scalar (pointers are
//!   never bound by `let`/`var`: only parameters and arrays are pointers).
//! * `x = v;` — `x` is a `var` variable in scope (not a `let`, parameter, loop counter, array
//!   or call result) and `v` has its type.
//! * `p[i] = v;` — `p` a pointer variable in scope, not into `constant` memory; `i` an
//!   integer; `v` of the element type.
//! * `local a: T[n];`, `private a: T[n];` — the variable is a `ptr<local, T>` or
//!   `ptr<private, T>`, `T` is not `bool`, `n > 0`. Local arrays only directly in the
//!   kernel's top-level body block (not inside `if`, `for`, `while` or a nested block);
//!   private arrays anywhere.
//! * `if c {..} else {..}`, `while c {..}` — `c` is `bool`.
//! * `for i: T in lo .. hi step s {..}` — `T` an integer type; `lo`, `hi`, `s` of type `T`;
//!   the counter cannot be assigned in the body.
//! * `barrier(..)`, `fence(..)` — no operands, no result, and a non-empty fence (local
//!   and/or global).
//! * Atomics `atomic_op(p, i, v)` and `atomic_cmpxchg(p, i, cmp, v)` — `p` is a variable
//!   (not an expression) pointing to global, local or generic memory (not constant or
//!   private); `i` an integer; 1 value operand (2 for cmpxchg: compare, then value) of the
//!   element type; the element type is i32, u32, i64 or u64 (f32 also for `atomic_add`); the
//!   optional result variable has the element type.
//!
//! # Scoping
//!
//! `let`, `var`, array and call-result bindings are in scope for the rest of the enclosing
//! block (a branch or loop body that is a single statement is a block of its own); a `for`
//! counter in the loop body (not in its bounds); parameters in the whole kernel. A name may
//! not be bound while another binding of the same name is in scope (no shadowing, parameters
//! included), but may be bound again once the earlier binding's scope has ended: two
//! sequential `for i` loops, or `let t` in both branches of an `if`. Using an unbound name is
//! an error. Every name (kernels, parameters, bindings) must be an identifier of the text
//! format that is not a reserved word, so that every verified object prints as text that
//! parses back.
//!
//! # Kernels and modules
//!
//! Parameter names are unique. Parameters are scalars or pointers to `global`, `constant` or
//! `generic` memory whose element type is not `bool`. Every component of
//! `#reqd_work_group_size` is positive. Kernel names in a module are unique.
//!
//! (A pointer to `bool` is rejected where it is declared, as a parameter or an array; loads
//! and stores through it are not reported again.)
//!
//! # What an error points at
//!
//! [`VerifyError::node`] is the innermost offending node: the operator, select, cast, load,
//! built-in or intrinsic expression whose own rule fails; a variable reference that is
//! unbound or mistyped; the index expression of a load or store that is not an integer; the
//! value of a `let`/`var`/assignment/store/loop bound or the condition of an `if`/`while`
//! whose type is wrong; the pointer operand of an atomic on the wrong memory; the statement
//! itself for a binding that shadows, binds a pointer or allocates a bad array, for an
//! assignment to something that is not a `var`, for a store through `constant` memory or a
//! non-pointer, for a `for` counter that is not an integer, for a call with the wrong
//! operands or result. Errors about a kernel's header (parameters, attributes, a duplicate
//! name) have no node, and are located at the kernel's name.
//!
//! A node whose own rule fails is not used to report its ancestors, so one mistake deep in
//! an expression gives one error, not one per enclosing operator.

mod expr;
mod matrix;
mod shared;
mod stmt;
mod vector;
mod warpgroup;

mod verified;

pub use vector::known_residue;
pub use verified::{ToVerified, Verified};

use std::fmt;

// Every reference looks its name up: hashbrown's hasher, not std's SipHash (a tenth of the
// verifier's time on generated kernels).
use hashbrown::{HashMap, HashSet};

use crate::expr::{Expr, ExprNode, Var};
use crate::kernel::{Kernel, Module};
use crate::scope::Scopes;
use crate::stmt::{MemFence, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};

/// The IR object an error is about.
#[derive(Clone, Debug)]
pub enum Node {
    /// An expression.
    Expr(Expr),
    /// A statement.
    Stmt(Stmt),
}

/// One verification failure.
#[derive(Clone, Debug)]
pub struct VerifyError {
    /// The kernel it was found in.
    pub kernel: String,
    /// What is wrong, naming the offending construct.
    pub message: String,
    /// The offending node (the innermost one), if the error is about one; errors about a
    /// kernel's header (parameters, attributes, name) have none.
    pub node: Option<Node>,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in kernel `{}`: {}", self.kernel, self.message)
    }
}

impl std::error::Error for VerifyError {}

/// Verifies one kernel, returning every error found, in source order.
pub fn verify_kernel(k: &Kernel) -> Result<(), Vec<VerifyError>> {
    // The checker recurses over expressions: check the depth-bounded form (same meaning,
    // same errors; see crate::depth).
    let k = &crate::depth::bound_kernel(k);
    let mut c = Checker::new(k.name());
    c.kernel(k);
    if c.errors.is_empty() {
        Ok(())
    } else {
        Err(c.errors)
    }
}

thread_local! {
    static MODULES_VERIFIED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many modules [`verify_module`] has checked on the calling thread: a module is
/// verified once, where it is made, and a test reads this to see that a build verifies
/// nothing again. (Debug builds' checks of pass output are not counted.)
pub fn modules_verified() -> u64 {
    MODULES_VERIFIED.with(|n| n.get())
}

/// Verifies every kernel of a module and that kernel names are unique, returning every error
/// found, in source order.
pub fn verify_module(m: &Module) -> Result<(), Vec<VerifyError>> {
    MODULES_VERIFIED.with(|n| n.set(n.get() + 1));
    check_module(m)
}

/// [`verify_module`], uncounted: the debug check of a pass's output.
fn check_module(m: &Module) -> Result<(), Vec<VerifyError>> {
    let mut errs = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for k in &m.kernels {
        if !seen.insert(k.name()) {
            errs.push(VerifyError {
                kernel: k.name().to_string(),
                message: format!("another kernel is already named `{}`", k.name()),
                node: None,
            });
        }
        if let Err(e) = verify_kernel(k) {
            errs.extend(e);
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// What introduced a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Param,
    Let,
    Mutable,
    Counter,
    Array,
    CallResult(&'static str),
}

impl Kind {
    fn describe(self) -> String {
        match self {
            Kind::Param => "a kernel parameter".into(),
            Kind::Let => "a `let` binding".into(),
            Kind::Mutable => "a `var` variable".into(),
            Kind::Counter => "a loop counter".into(),
            Kind::Array => "an array".into(),
            Kind::CallResult(f) => format!("the result of `{f}`"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Binding {
    ty: Type,
    kind: Kind,
}

/// Where a statement sits: directly in the kernel's top-level block, or inside a construct.
type Place = Option<&'static str>;

struct Checker<'k> {
    kernel: &'k str,
    errors: Vec<VerifyError>,
    /// The live bindings (a shadowing binding, already reported, temporarily replaces the
    /// outer one).
    scopes: Scopes<Binding>,
    /// Bindings [`Checker::reference`] found, by the address of the name's text: a name is
    /// referred to many times between two changes of the scopes (each accumulator and
    /// vector of an unrolled kernel's long blocks), and this answers again without hashing
    /// and comparing its text. See [`Recent`].
    recent: Vec<Recent>,
    /// Statements checked clean that occur more than once in the tree, by address, with
    /// what they looked up (see [`shared`]): an unrolled loop's copies share its body's
    /// statements, checked again only where a name they read means something else.
    seen: HashMap<usize, usize>,
    /// The entries of [`Checker::seen`]: the statement (held, so that its address stays its
    /// own) and every lookup its check made, in order, with its answer.
    seen_lookups: Vec<(Stmt, Lookups)>,
    /// While a shared statement is checked the first time: the lookups made so far.
    recording: Option<Lookups>,
}

/// Lookups a check made, in order, each with its answer (see [`shared`]).
type Lookups = Vec<(Var, Option<Binding>)>;

/// One slot of [`Checker::recent`]: the name (held, so that its address stays its own),
/// [`Scopes::changes`] when it was looked up, and its binding then.
type Recent = Option<(std::sync::Arc<str>, u64, Binding)>;

/// The slots of [`Checker::recent`] (a power of two).
const RECENT_SLOTS: usize = 1 << RECENT_BITS;

/// Bits of a slot number: room for the names an optimized kernel's long blocks keep live
/// (hundreds of `let`s after CSE).
const RECENT_BITS: u32 = 9;

/// The text of an expression for a message, in backticks and shortened if long.
pub(crate) fn show(e: &Expr) -> String {
    const MAX_NODES: usize = 48;
    const MAX_CHARS: usize = 72;
    if let ExprNode::Var(v) = e.node() {
        return format!("`{}`", v.name());
    }
    // Only print small trees: a printer walks the whole tree (and may recurse on it).
    let mut count = 0;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        count += 1;
        if count > MAX_NODES {
            return "`...`".to_string();
        }
        stack.extend(x.children());
    }
    let text = e.to_string();
    if text.chars().count() > MAX_CHARS {
        let cut: String = text.chars().take(MAX_CHARS - 3).collect();
        format!("`{cut}...`")
    } else {
        format!("`{text}`")
    }
}

fn fence_text(f: MemFence) -> String {
    match (f.local, f.global) {
        (true, true) => "local, global".into(),
        (true, false) => "local".into(),
        (false, true) => "global".into(),
        (false, false) => String::new(),
    }
}

impl<'k> Checker<'k> {
    fn new(kernel: &'k str) -> Self {
        Checker {
            kernel,
            errors: Vec::new(),
            scopes: Scopes::default(),
            recent: vec![None; RECENT_SLOTS],
            seen: HashMap::new(),
            seen_lookups: Vec::new(),
            recording: None,
        }
    }

    fn error(&mut self, node: Option<Node>, message: String) {
        self.errors.push(VerifyError { kernel: self.kernel.to_string(), message, node });
    }

    fn at_expr(&mut self, e: &Expr, message: String) {
        self.error(Some(Node::Expr(e.clone())), message);
    }

    fn at_stmt(&mut self, s: &Stmt, message: String) {
        self.error(Some(Node::Stmt(s.clone())), message);
    }

    /// Reports a name that the text format cannot spell.
    fn check_name(&mut self, name: &str, what: &str, node: impl FnOnce() -> Option<Node>) {
        if !crate::parse::is_identifier(name) {
            self.error(
                node(),
                format!(
                    "{what} `{}` is not a valid name: names are identifiers                      ([A-Za-z_][A-Za-z0-9_]*) other than reserved words and type names",
                    name.escape_debug()
                ),
            );
        }
    }

    fn kernel(&mut self, k: &Kernel) {
        self.scopes.push();
        self.check_name(k.name(), "kernel name", || None);
        let mut names: HashSet<&str> = HashSet::new();
        for p in k.params() {
            self.check_name(p.name(), "parameter", || None);
            if !names.insert(p.name()) {
                self.error(None, format!("parameter `{}` is declared twice", p.name()));
            }
            match p.ty() {
                Type::Scalar(_) => {}
                Type::Frag(_) => self.error(
                    None,
                    format!(
                        "parameter `{}` is a fragment ({}); fragments live in variables only",
                        p.name(),
                        p.ty()
                    ),
                ),
                Type::Vector(..) => self.error(
                    None,
                    format!(
                        "parameter `{}` is a vector ({}); pass vectors through a buffer and \
                         `vload` them",
                        p.name(),
                        p.ty()
                    ),
                ),
                Type::Ptr(space, elem) => {
                    if !matches!(
                        space,
                        AddrSpace::Global | AddrSpace::Constant | AddrSpace::Generic
                    ) {
                        self.error(
                            None,
                            format!(
                                "parameter `{}` is a pointer to {space} memory; parameters may \
                                 point to global, constant or generic memory only{}",
                                p.name(),
                                if space == AddrSpace::Local {
                                    " (declare local arrays in the kernel body)"
                                } else {
                                    ""
                                }
                            ),
                        );
                    }
                    if elem == Scalar::Bool {
                        self.error(
                            None,
                            format!(
                                "parameter `{}` points to bool elements; bool cannot be stored \
                                 in memory",
                                p.name()
                            ),
                        );
                    }
                }
            }
            self.scopes.bind_shared(p.name_arc(), Binding { ty: p.ty(), kind: Kind::Param });
        }
        if let Some(sz) = k.attrs().reqd_work_group_size {
            if sz.contains(&0) {
                self.error(
                    None,
                    format!(
                        "`#reqd_work_group_size({}, {}, {})`: every component must be positive",
                        sz[0], sz[1], sz[2]
                    ),
                );
            }
        }
        self.block_body(k.body(), None);
        self.scopes.pop();
    }

    /// Checks `s` as a block of its own (a new scope), its statements in place `place`.
    fn block_body(&mut self, s: &Stmt, place: Place) {
        self.scopes.push();
        match s.node() {
            StmtNode::Block(stmts) => {
                for x in stmts {
                    self.stmt(x, place);
                }
            }
            _ => self.stmt(s, place),
        }
        self.scopes.pop();
    }

    /// Checks a reference to `v` (a use, a load or store buffer, an assignment target).
    /// Returns the binding if it is in scope. `node` (where an error is reported) is built
    /// only for an error: nearly every reference checks out.
    fn reference(&mut self, v: &Var, node: impl FnOnce() -> Node, what: &str) -> Option<Binding> {
        match self.lookup(v) {
            None => {
                self.error(Some(node()), format!("{what} unbound variable `{}`", v.name()));
                None
            }
            Some(b) => {
                if b.ty != v.ty() {
                    self.error(
                        Some(node()),
                        format!(
                            "`{}` is referred to as {} but bound as {} ({})",
                            v.name(),
                            v.ty(),
                            b.ty,
                            b.kind.describe()
                        ),
                    );
                }
                Some(b)
            }
        }
    }

    /// What `v`'s name is bound to now ([`Scopes::get`]), through [`Checker::recent`];
    /// recorded while a shared statement is checked (see [`shared`]).
    fn lookup(&mut self, v: &Var) -> Option<Binding> {
        let b = self.lookup_now(v);
        if let Some(r) = &mut self.recording {
            r.push((v.clone(), b));
        }
        b
    }

    /// [`Checker::lookup`], unrecorded.
    fn lookup_now(&mut self, v: &Var) -> Option<Binding> {
        let name = v.name_arc();
        let addr = std::sync::Arc::as_ptr(name) as *const u8 as usize as u64;
        // Fibonacci hashing of the address: its low bits are the allocator's alignment.
        let slot = (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT_BITS)) as usize;
        let now = self.scopes.changes();
        if let Some((n, at, b)) = &self.recent[slot & (RECENT_SLOTS - 1)] {
            if *at == now && std::sync::Arc::ptr_eq(n, name) {
                return Some(*b);
            }
        }
        let b = self.scopes.get(v.name()).copied()?;
        self.recent[slot & (RECENT_SLOTS - 1)] = Some((name.clone(), now, b));
        Some(b)
    }

    /// Binds `v` for the rest of the current scope, reporting shadowing at `s`.
    fn bind(&mut self, v: &Var, kind: Kind, s: &Stmt) {
        self.check_name(v.name(), "variable", || Some(Node::Stmt(s.clone())));
        if let Some(prev) = self.scopes.get(v.name()).copied() {
            self.at_stmt(
                s,
                format!(
                    "`{}` is already bound here, as {}; a name cannot be bound again while it is \
                     in scope (no shadowing)",
                    v.name(),
                    prev.kind.describe()
                ),
            );
        }
        self.scopes.bind_shared(v.name_arc(), Binding { ty: v.ty(), kind });
    }
}
