//! Tests of the repeats half's counting structures, and of the pass on a kernel that takes
//! each path they have.

use super::*;

/// Every statement without nested statements of the examples and the pass filetests:
/// [`Counter::leaf`] counts what [`Counter::of`]'s general walk counts, and says it may
/// have a candidate exactly when [`may_have_candidate`] does.
#[test]
fn leaf_summary_agrees_with_separate_walks() {
    let (mut leaves, mut may) = (0, 0);
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        let stmts = crate::util::all_stmts(k.body());
        for s in stmts.iter().filter(|s| is_leaf(s)) {
            let (counts, m) = Counter::default().leaf(s, &mutable);
            let mut walked = ExprMap::new();
            count_stmt(s, &mut walked, true, &mutable);
            assert_eq!(*counts, walked, "{s}");
            assert_eq!(m, may_have_candidate(s, &mutable), "{s}");
            leaves += 1;
            may += usize::from(m);
        }
    }
    // Both answers occur, on many statements.
    assert!(leaves > 100 && may > 10 && may < leaves, "{leaves} leaves, {may} may");
}

/// A fresh table ([`Counter::default`]): every statement is searched or counted anew.
fn fresh() -> Counter {
    Counter::default()
}

/// [`Counter::occurs`] says what [`Counter::of`]'s counts say, for every statement of the
/// examples and the pass filetests and every stable value of its kernel: a statement not
/// counted yet is searched (a leaf) or counted (one with nested statements), one counted
/// already is looked up.
#[test]
fn occurs_agrees_with_counts() {
    let (mut yes, mut no) = (0, 0);
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        let mut all = ExprMap::new();
        count_stmt(k.body(), &mut all, true, &mutable);
        let values: Vec<Expr> = all.into_keys().collect();
        let mut counted = fresh();
        for s in &crate::util::all_stmts(k.body()) {
            let counts = counted.of(s, &mutable);
            let mut searched = fresh();
            for e in &values {
                let want = counts.get(e).is_some_and(|&n| n > 0);
                assert_eq!(searched.occurs(s, e, &mutable), want, "{e} in {s}");
                assert_eq!(counted.occurs(s, e, &mutable), want, "{e} in {s}");
                if want {
                    yes += 1;
                } else {
                    no += 1;
                }
            }
        }
    }
    assert!(yes > 100 && no > 100, "{yes} found, {no} not");
}

/// [`Counter::of`] on every statement with nested statements (made from its parts' counts,
/// the largest of them shared or copied: [`sum`]) counts what one walk of the whole
/// statement counts: with a table filled outermost first (its leaves counted in place, see
/// [`Counter::add_to_block`]), and with one where every other leaf was counted (cached)
/// first, so that a block's sum takes some leaves' maps and counts the others in place.
#[test]
fn composed_counts_are_one_walks_counts() {
    let mut nested = 0;
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        let all = crate::util::all_stmts(k.body());
        let mut counter = fresh();
        let mut mixed = fresh();
        for s in all.iter().filter(|s| is_leaf(s)).step_by(2) {
            mixed.of(s, &mutable);
        }
        for s in all.iter().filter(|s| !is_leaf(s)) {
            let mut want = ExprMap::new();
            count_stmt(s, &mut want, true, &mutable);
            assert_eq!(*counter.of(s, &mutable), want, "{s}");
            assert_eq!(*mixed.of(s, &mutable), want, "{s}");
            nested += 1;
        }
    }
    assert!(nested > 100, "{nested} statements with nested statements");
}

/// A block's counts less those of its first statements are the counts of the rest (zero
/// counts aside): what the first search of a block still as it was starts from.
#[test]
fn block_counts_less_a_prefix_are_the_rest() {
    let mut blocks = 0;
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        let mut counter = fresh();
        for s in crate::util::all_stmts(k.body()) {
            let StmtNode::Block(stmts) = s.node() else { continue };
            let whole = counter.of(&s, &mutable);
            let n = stmts.len();
            for i in [0, 1, 2, n / 2, n.saturating_sub(1), n].into_iter().filter(|&i| i <= n) {
                let mut less = (*whole).clone();
                for t in &stmts[..i] {
                    merge(&mut less, &counter.of(t, &mutable), false);
                }
                less.retain(|_, c| *c > 0);
                let mut rest = ExprMap::new();
                for t in &stmts[i..] {
                    merge(&mut rest, &counter.of(t, &mutable), true);
                }
                assert_eq!(less, rest, "{s} less its first {i}");
            }
            blocks += 1;
        }
    }
    assert!(blocks > 100, "{blocks} blocks");
}

/// [`Counter::take_out`] takes out of a block's counts what merging its statements' counts
/// out does, for statements counted already (looked up) and not (walked, or counted).
#[test]
fn taking_a_statement_out_is_merging_its_counts_out() {
    let mut stmts = 0;
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        let mut whole = ExprMap::new();
        count_stmt(k.body(), &mut whole, true, &mutable);
        let mut counted = fresh();
        for s in &crate::util::all_stmts(k.body()) {
            let mut want = whole.clone();
            merge(&mut want, &counted.of(s, &mutable), false);
            let mut got = whole.clone();
            counted.take_out(s, &mut got, &mutable);
            assert_eq!(got, want, "{s}");
            let mut got = whole.clone();
            fresh().take_out(s, &mut got, &mutable);
            assert_eq!(got, want, "{s}");
            stmts += 1;
        }
    }
    assert!(stmts > 100, "{stmts} statements");
}

/// The pass on a kernel whose inner blocks are searched from their own counts (the loop's
/// body and the block in it are unchanged when reached), with a value bound in an inner
/// block and repeated after it closes (not reused there), a load repeated across statements
/// (never reused) and a mutable variable: the output of the pass before these structures.
#[test]
fn nested_blocks_keep_their_bindings() {
    let src = "kernel k(a: ptr<global, f32>, n: i32) {
  let i: i32 = global_id(0) as i32;
  var s: f32 = 0.0;
  for j: i32 in 0 .. n {
    let x: f32 = a[j];
    {
      s = s + x;
      a[i * 4 + j] = x * 2.0;
      {
        let y: f32 = x * 2.0 + a[i * 4 + j];
        a[i * 4 + j + 1] = y + s;
      }
      a[(i * 4 + j) * 2] = s + s;
    }
    a[i * 4 + j + 2] = x * 2.0;
  }
  a[i * 4] = s;
}";
    let want = "kernel k(a: ptr<global, f32>, n: i32) {
  let i: i32 = global_id(0) as i32;
  var s: f32 = 0.0;
  for j: i32 in 0 .. n {
    let x: f32 = a[j];
    {
      s = s + x;
      let cse1: f32 = x * 2.0;
      let cse0: i32 = i * 4 + j;
      a[cse0] = cse1;
      {
        let y: f32 = cse1 + a[cse0];
        a[cse0 + 1] = y + s;
      }
      a[cse0 * 2] = s + s;
    }
    a[i * 4 + j + 2] = x * 2.0;
  }
  a[i * 4] = s;
}";
    let m = kiln_ir::parse_module(src).expect("parses");
    assert_eq!(crate::cse::cse(&m.kernels[0]).to_string(), want);
}

/// A stable binding keeps the block's counts ([`Repeats::bind`]'s `later`) what counting
/// the rewritten block again gives (zero counts aside): the replaced occurrences' counts
/// are taken away once per binding, times the occurrences, as one by one.
#[test]
fn binding_keeps_the_counts_of_the_block() {
    let mut bound = 0;
    for (_, k) in crate::util::repository_kernels() {
        let mutable = Mutable::of(k.body());
        for s in crate::util::all_stmts(k.body()) {
            let StmtNode::Block(stmts) = s.node() else { continue };
            let mut whole = ExprMap::new();
            count_stmt(&s, &mut whole, true, &mutable);
            // The values that occur more than once, largest first (as the pass binds them).
            let mut values: Vec<Expr> =
                whole.iter().filter(|(_, &n)| n > 1).map(|(e, _)| e.clone()).collect();
            values.sort_by_key(|e| std::cmp::Reverse(e.depth()));
            for e in values.iter().take(3) {
                let mut r = Repeats {
                    mutable: mutable.clone(),
                    names: None,
                    kernel: k.clone(),
                    taken: None,
                    next: 0,
                    counter: fresh(),
                };
                let mut out = stmts.clone();
                let mut idle = vec![false; out.len()];
                let mut later = Some(whole.clone());
                r.bind(&mut out, 0, 0, 0, e, true, &mut later, &mut idle);
                let mut got = later.unwrap();
                got.retain(|_, c| *c > 0);
                let mut want = ExprMap::new();
                for t in &out {
                    count_stmt(t, &mut want, true, &mutable);
                }
                want.retain(|_, c| *c > 0);
                assert_eq!(got, want, "binding {e} in {s}");
                bound += 1;
            }
        }
    }
    assert!(bound > 20, "{bound} bindings");
}
