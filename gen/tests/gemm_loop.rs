//! Issue 26 item 3: the inner loop of an SGEMM stays the fast one on odd sizes and
//! transposed operands. The `-O` PTX of the measured blocking (`wg 8x16 tile 8x8 k 8`,
//! unrolled, double-buffered, 4-lane vectors) is taken apart: its multiply loop must hold the
//! whole unrolled k-tile of FMAs, only 4-lane global loads (A's and B's tiles, vectors along
//! their rows or along K), no test but the loop's own and no division (the buffer slots
//! alternate by a subtraction). Edge tiles read clamped rows
//! instead of testing M and N, and K's last, partial k-tile is peeled off the loop, so no
//! size that is not a multiple of the tile puts a test back in. Where K is a multiple of the
//! k-tile the loop runs every k-tile's step: the kernel holds its multiply once (issue 26
//! item 4, the JIT's work).

use kiln_backends::ptx;
use kiln_gen::{GemmConfig, GemmProblem};
use kiln_ir::Scalar;
use kiln_passes::pipeline::optimize;

/// An unrolled, double-buffered blocking of 8 x 16 work-items with 4-lane vectors: `tn` 8
/// and `k_tile` 8 is the H100's best (the tuner's first seed), `tn` 4 and `k_tile` 16 a
/// seed with smaller tiles.
fn seed(tn: u32, k_tile: u32) -> GemmConfig {
    GemmConfig {
        wg_m: 8,
        wg_n: 16,
        tm: 8,
        tn,
        k_tile,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    }
}

/// The body of the PTX loop with the most FMAs: from its label to the branch back to it.
fn multiply_loop(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut best: Vec<&str> = Vec::new();
    for (end, l) in lines.iter().enumerate() {
        let Some(target) = l.split("bra ").nth(1).map(|t| t.trim_end_matches(';')) else {
            continue;
        };
        let label = format!("{target}:");
        let Some(start) = lines[..end].iter().position(|x| *x == label) else { continue };
        let body = lines[start..=end].to_vec();
        let fmas = |b: &[&str]| b.iter().filter(|x| x.starts_with("fma.")).count();
        if fmas(&body) > fmas(&best) {
            best = body;
        }
    }
    best
}

fn count(body: &[&str], op: &str) -> usize {
    body.iter().filter(|l| l.starts_with(op) || l.contains(&format!(" {op}"))).count()
}

#[test]
fn multiply_loop_has_no_edge_tests_and_keeps_vector_loads() {
    let p = |m, n, k, trans_a, trans_b| GemmProblem { m, n, k, trans_a, trans_b, ty: Scalar::F32 };
    let cases = [
        // Edges in M and N (3000 = 46 x 64 + 56 = 23 x 128 + 56).
        (p(3000, 3000, 3000, false, false), seed(8, 8)),
        (p(3000, 3000, 3000, true, false), seed(8, 8)),
        (p(3000, 3000, 3000, false, true), seed(8, 8)),
        (p(3000, 3000, 3000, true, true), seed(8, 8)),
        // K's last k-tile is partial (1000 = 62 x 16 + 8; 1004 = 125 x 8 + 4).
        (p(1000, 1000, 1000, false, false), seed(4, 16)),
        (p(1000, 1000, 1004, false, true), seed(8, 8)),
        (p(4096, 4096, 4096, false, true), seed(8, 8)),
        // An 8 x 8 block at k-tile 16 (1088 statements unrolled: past the unroll pass's
        // limit, so the generator unrolls it), the H200's best at B^T.
        (p(4096, 4096, 4096, false, true), seed(8, 16)),
        (p(3000, 3000, 3000, false, false), seed(8, 16)),
    ];
    for (problem, cfg) in cases {
        let g = problem.generate(&cfg).unwrap();
        let text = ptx::emit_kernel(&optimize(&g.kernel), &ptx::Options::sm(90)).unwrap();
        let body = multiply_loop(&text);
        let what = format!("{problem:?} {cfg}:\n{}", body.join("\n"));
        let fmas = (cfg.tm * cfg.tn * cfg.k_tile) as usize;
        assert_eq!(count(&body, "fma.rn.f32"), fmas, "{what}");
        // No copy of the multiply outside the loop (a peeled last step, a drain after it)
        // where K is a multiple of the k-tile; where it is not, exactly the peeled step and
        // the drain (docs/generator.md: the one-loop form of that case was slower).
        let all: Vec<&str> = text.lines().map(str::trim).collect();
        let copies = if problem.k % cfg.k_tile as i64 == 0 { 1 } else { 3 };
        assert_eq!(
            count(&all, "fma.rn.f32"),
            copies * fmas,
            "{problem:?} {cfg}: FMAs outside the loop"
        );
        // One test and one branch: the loop's own.
        assert_eq!(count(&body, "setp."), 1, "{what}");
        assert_eq!(count(&body, "bra "), 1, "{what}");
        // The tiles' copies: (BM + BN) x k_tile elements in 4-lane vectors over the
        // work-items, nothing scalar.
        let vectors = (cfg.tile_m() + cfg.tile_n()) * cfg.k_tile / 4 / cfg.threads();
        assert_eq!(count(&body, "ld.global.v4.f32"), vectors as usize, "{what}");
        assert_eq!(count(&body, "ld.global.f32"), 0, "{what}");
        // No division: ptxas lowers `div`/`rem` by an immediate to its generic sequence
        // (about twenty instructions), which the buffer slots' `kt % 2` cost every step.
        assert_eq!(count(&body, "rem.") + count(&body, "div."), 0, "{what}");
    }
}
