//! The tuner's model and search (kiln_gen::tuner) with a deterministic fake timer: the
//! ranking is deterministic and puts the measured best blockings near the top, neighbours
//! stay valid, and the default search (seeds, model's best, local search; 24 timings)
//! reaches at least 0.97 of the best blocking of an exhaustive search over the documented
//! subset, on a timer that disagrees with the model by up to 10% per blocking.

use kiln_gen::tuner::{self, Dims, Target};
use kiln_gen::GemmConfig;

/// The suite's shapes (benches/gpu/gemm_suite.py) and a few small ones.
const SHAPES: [[u64; 3]; 9] = [
    [4096, 4096, 4096],
    [2048, 8192, 1024],
    [3000, 3000, 3000],
    [1536, 1536, 12288],
    [1000, 1000, 1000],
    [8192, 256, 256],
    [256, 256, 16384],
    [64, 64, 64],
    [17, 33, 100],
];

/// FNV-1a of the blocking's printed form: a per-blocking number that does not depend on
/// the model or on the order anything is timed in.
fn fnv(c: &GemmConfig) -> u64 {
    c.to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// A fake device: the model's time scaled by a per-blocking factor from 0.9 to 1.1, so the
/// model's ranking is only roughly right and the search has to find the true best.
fn fake_time(c: &GemmConfig, mnk: [u64; 3], t: &Target) -> Result<f64, String> {
    let noise = 0.9 + 0.2 * (fnv(c) % 1000) as f64 / 1000.0;
    tuner::predict(c, mnk, t).map(|p| p * noise).ok_or_else(|| format!("{c}: does not run"))
}

#[test]
fn ranking_is_deterministic_and_valid() {
    let t = Target::h100();
    for mnk in SHAPES {
        let space = tuner::space(mnk);
        let a = tuner::rank(&space, mnk, &t);
        let b = tuner::rank(&space, mnk, &t);
        assert_eq!(a, b);
        assert_eq!(a.len(), space.len());
        assert!(a.iter().all(|c| c.validate().is_ok() && c.fits(mnk[0], mnk[1], mnk[2])));
        let p = |c: &GemmConfig| tuner::predict(c, mnk, &t).unwrap_or(f64::INFINITY);
        // The model's best, or a seed (perhaps split) it predicts within SEED_TRUST of that,
        // with a work-group for every unit.
        let first = tuner::first_choice(mnk, &t);
        let unsplit = GemmConfig { split_k: 1, ..first };
        let large = t.large_seeds.contains(&first) && tuner::full_waves(&first, mnk, &t);
        assert!(
            first == a[0]
                || ((t.seeds.contains(&unsplit) || large)
                    && p(&first) <= tuner::SEED_TRUST * p(&a[0])
                    && tuner::fills(&first, mnk, &t)),
            "{mnk:?}: {first}"
        );
        assert!(a.windows(2).all(|w| p(&w[0]) <= p(&w[1])), "{mnk:?}: not in the model's order");
    }
}

/// The blocking measured best at 4096^3 on the H100 (benches/gpu/README.md) is among the
/// model's first choices there, and the default blocking (8x8, 2x2, scalar, not unrolled)
/// far behind it.
#[test]
fn the_model_prefers_the_measured_best_blocking() {
    let t = Target::h100();
    let mnk = [4096, 4096, 4096];
    let ranked = tuner::rank(&tuner::space(mnk), mnk, &t);
    let at = |c: &GemmConfig| ranked.iter().position(|x| x == c).unwrap();
    let best: GemmConfig = "wg=8x16 tile=8x8 k=8 slm=2 unroll=1 vec=4".parse().unwrap();
    assert!(at(&best) < 40, "measured best at {} of {}", at(&best), ranked.len());
    assert!(at(&GemmConfig::default()) > ranked.len() / 2);
    // Untimed, 4096^3 gets the blocking measured best there: the large seed (0.945x
    // cuBLAS on the H200, against 0.910x for the first seed; the model's own best measured
    // 0.76x on the H100).
    assert_eq!(tuner::first_choice(mnk, &t), t.large_seeds[0]);
    // A deep reduction over few tiles: the model splits K.
    let deep = [256, 256, 16384];
    assert!(tuner::first_choice(deep, &t).split_k > 1, "{}", tuner::first_choice(deep, &t));
    // On the cpu device's model, without registers to run out of, large tiles still win.
    let cpu = tuner::first_choice([512, 512, 512], &Target::cpu(2));
    assert!(cpu.tile_m() * cpu.tile_n() >= 256, "{cpu}");
}

/// Issue 26: untimed, a deep reduction over a small C gets the first seed split (measured
/// 0.93x cuBLAS at 1536 x 1536 x 12288 on the H100, against 0.63x for the model's own best),
/// and so does a problem whose tiles of the first seed leave SMs idle (1000^3: 128 tiles,
/// 132 SMs); the square problems keep the first seed unsplit.
#[test]
fn the_first_choice_splits_seeds_that_leave_units_idle() {
    let t = Target::h100();
    let first_seed = t.seeds[0];
    let deep = tuner::first_choice([1536, 1536, 12288], &t);
    assert_eq!(GemmConfig { split_k: 1, ..deep }, first_seed, "{deep}");
    assert!(deep.split_k > 1, "{deep}");
    let deeper = tuner::first_choice([512, 512, 32768], &t);
    assert_eq!((GemmConfig { split_k: 1, ..deeper }, deeper.split_k), (first_seed, 16));
    // 1000^3: the first seed's 128 tiles leave SMs idle; split 2 ways they measured 1.03x
    // cuBLAS on the H200, the model's 64 x 64 tiles 0.77x.
    let odd = tuner::first_choice([1000, 1000, 1000], &t);
    assert!(!tuner::fills(&first_seed, [1000, 1000, 1000], &t));
    assert!(tuner::fills(&odd, [1000, 1000, 1000], &t), "{odd}");
    assert_eq!((GemmConfig { split_k: 1, ..odd }, odd.split_k), (first_seed, 2), "{odd}");
    // The squares fill the units with the large seed's 128 x 128 tiles, unsplit; 1536 x
    // 1536 (144 of them on 132 units) and 1000^3 do not.
    for square in [2048, 4096, 8192] {
        assert_eq!(tuner::first_choice([square; 3], &t), t.large_seeds[0], "{square}");
    }
    assert!(!tuner::full_waves(&t.large_seeds[0], [1536, 1536, 12288], &t));
    assert!(!tuner::full_waves(&t.large_seeds[0], [1000, 1000, 1000], &t));
}

/// Issue 26: a batch's work-groups fill the units together. The first choice for 64 GEMMs
/// of 256^3 in one launch (measured 0.216x cuBLAS when the model saw one GEMM and split its
/// K 16 ways) takes the first seed unsplit, as the same work in one 2048 x 2048 x 256 GEMM
/// would; one 256^3 GEMM alone is still split or shrunk to fill the units.
#[test]
fn a_batch_fills_the_units_without_splitting_k() {
    let t = Target::h100();
    let one = [256, 256, 256];
    let batch = Dims { mnk: one, batch: 64, k_major: false, mn_major: false };
    let first = tuner::first_choice(batch, &t);
    assert_eq!(first, t.large_seeds[0], "{first}");
    assert!(tuner::fills(&first, batch, &t));
    assert!(!tuner::fills(&first, one, &t));
    let alone = tuner::first_choice(one, &t);
    assert!(alone != first && tuner::fills(&alone, one, &t), "{alone}");
    // The model's time grows with the batch, less than 64-fold: one GEMM's 4 tiles leave
    // 128 of the 132 units idle.
    let (p1, p64) =
        (tuner::predict(&first, one, &t).unwrap(), tuner::predict(&first, batch, &t).unwrap());
    assert!(p64 > 1.5 * p1 && p64 < 32.0 * p1, "{p1} {p64}");
}

#[test]
fn neighbours_are_valid_distinct_and_one_step_away() {
    let mnk = [1536, 1536, 12288];
    let c: GemmConfig = "wg=8x16 tile=8x8 k=8 slm=2 unroll=1 vec=4 split=2".parse().unwrap();
    let ns = tuner::neighbours(&c, mnk);
    assert!(ns.len() >= 10, "{ns:?}");
    assert!(!ns.contains(&c));
    for x in &ns {
        x.validate().unwrap();
        let changed = [
            x.wg_m != c.wg_m || x.wg_n != c.wg_n,
            x.tm != c.tm || x.tn != c.tn,
            x.k_tile != c.k_tile,
            x.slm_depth != c.slm_depth,
            x.vec != c.vec,
            x.split_k != c.split_k,
            x.unroll != c.unroll,
        ];
        assert_eq!(changed.iter().filter(|&&b| b).count(), 1, "{x}");
    }
    assert!(ns.iter().any(|x| x.split_k == 4) && ns.iter().any(|x| x.split_k == 1));
}

/// Issue 26: the default search reaches 0.97 of the exhaustive subset's best on every shape
/// of the suite, timing at most 24 blockings; the exhaustive mode times the whole subset.
#[test]
fn default_search_reaches_the_exhaustive_best() {
    let t = Target::h100();
    let mut worst_spread = f64::INFINITY;
    for mnk in SHAPES {
        let mut calls = 0;
        let mut timer = |c: &GemmConfig| {
            calls += 1;
            fake_time(c, mnk, &t)
        };
        let all = tuner::exhaustive(mnk, &mut timer);
        assert_eq!(calls, tuner::subset(mnk).len());
        assert_eq!(all.timings.len() + all.errors.len(), calls);
        let (_, best) = all.best().unwrap();
        let mut timed = 0;
        let mut timer = |c: &GemmConfig| {
            timed += 1;
            fake_time(c, mnk, &t)
        };
        let found = tuner::search(mnk, &t, 24, &mut timer);
        assert!(timed <= 24, "{mnk:?}: {timed} timed");
        let (cfg, time) = found.best().unwrap();
        assert!(
            best / time >= 0.97,
            "{mnk:?}: the search found {cfg} at {:.3} of the exhaustive best ({} in the subset)",
            best / time,
            calls
        );
        worst_spread = worst_spread.min(best / even_spread(mnk, &t));
        // Deterministic: the same timer gives the same search.
        let again = tuner::search(mnk, &t, 24, &mut |c| fake_time(c, mnk, &t));
        assert_eq!(again, found);
    }
    // The search this replaced (24 blockings spread evenly over the candidate list) does
    // not pass this test: the timer is one that tells them apart.
    assert!(worst_spread < 0.97, "the even spread reaches {worst_spread:.3}");
}

/// The fastest of 24 blockings spread evenly over [`GemmConfig::candidates`] (the search
/// before issue 26), on the fake timer.
fn even_spread(mnk: [u64; 3], t: &Target) -> f64 {
    let cands = GemmConfig::candidates(mnk[0], mnk[1], mnk[2]);
    let n = 24.min(cands.len());
    (0..n)
        .map(|i| cands[if n == 1 { 0 } else { i * (cands.len() - 1) / (n - 1) }])
        .filter_map(|c| fake_time(&c, mnk, t).ok())
        .fold(f64::INFINITY, f64::min)
}

/// Issue 26: a search can never do worse than the untimed default, because it times the
/// default first; told ahead of each blocking ([`tuner::Timer::prepare`]), a timer sees
/// every blocking announced before it is timed, and the search times what the plain search
/// times, in the same order.
#[test]
fn the_default_is_timed_first_and_preparing_changes_nothing() {
    struct Recorder<'a> {
        mnk: [u64; 3],
        t: &'a Target,
        announced: Vec<GemmConfig>,
        unannounced: Vec<GemmConfig>,
    }
    impl tuner::Timer for Recorder<'_> {
        fn prepare(&mut self, next: &[GemmConfig]) {
            self.announced.extend_from_slice(next);
        }
        fn time(&mut self, c: &GemmConfig) -> Result<f64, String> {
            if !self.announced.contains(c) {
                self.unannounced.push(*c);
            }
            fake_time(c, self.mnk, self.t)
        }
    }
    let t = Target::h100();
    for mnk in SHAPES {
        let plain = tuner::search(mnk, &t, 24, &mut |c| fake_time(c, mnk, &t));
        let first = tuner::first_choice(mnk, &t);
        assert_eq!(plain.timings.first().map(|x| x.0), Some(first), "{mnk:?}");
        let mut r = Recorder { mnk, t: &t, announced: Vec::new(), unannounced: Vec::new() };
        let prepared = tuner::search_with(mnk, &t, 24, &mut r);
        assert_eq!(prepared, plain, "{mnk:?}");
        assert!(r.unannounced.is_empty(), "{mnk:?}: timed unannounced {:?}", r.unannounced);
        let best = prepared.best().unwrap().1;
        let default = prepared.timings[0].1;
        assert!(best <= default, "{mnk:?}");
    }
}

/// The confirmation re-times the fastest few and the default, interleaved, and keeps the
/// median of their rounds: a blocking whose one timing was lucky loses its place; one that
/// fails now is moved to the errors; the others keep their times.
#[test]
fn confirmation_retimes_the_finalists_interleaved() {
    let c = |s: &str| -> GemmConfig { s.parse().unwrap() };
    let lucky = c("wg=8x16 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let steady = c("wg=16x16 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let flaky = c("wg=8x8 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let slow = c("wg=8x8 tile=4x4 k=8 slm=2 unroll=1 vec=4");
    let default = c("wg=16x8 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let mut found = tuner::Searched {
        timings: vec![(lucky, 1.0), (steady, 1.1), (flaky, 1.2), (slow, 3.0), (default, 2.0)],
        errors: Vec::new(),
    };
    struct Log(Vec<GemmConfig>, [GemmConfig; 4]);
    impl tuner::Timer for Log {
        fn time(&mut self, c: &GemmConfig) -> Result<f64, String> {
            self.0.push(*c);
            let [lucky, steady, flaky, _] = self.1;
            match *c {
                x if x == lucky => Ok(1.5),
                x if x == steady => Ok(1.2),
                x if x == flaky => Err("lost".into()),
                _ => Ok(1.9),
            }
        }
    }
    let mut log = Log(Vec::new(), [lucky, steady, flaky, slow]);
    tuner::confirm(&mut found, &default, &mut log);
    // Three rounds of the three fastest and the default, in turn; the flaky one once.
    let round = [lucky, steady, default];
    let want: Vec<GemmConfig> =
        [vec![lucky, steady, flaky, default], round.to_vec(), round.to_vec()].concat();
    assert_eq!(log.0, want);
    assert_eq!(found.best(), Some((steady, 1.2)));
    assert_eq!(found.timings, vec![(lucky, 1.5), (steady, 1.2), (slow, 3.0), (default, 1.9)]);
    assert_eq!(found.errors, vec![(flaky, "lost".to_string())]);
    assert_eq!(tuner::FINALISTS, 3);
    assert_eq!(tuner::CONFIRM_ROUNDS, 3);
}

/// The default is kept unless a blocking times more than [`tuner::DEFAULT_MARGIN`] faster;
/// without a timing of the default, the fastest wins.
#[test]
fn the_default_wins_unless_clearly_beaten() {
    let c = |s: &str| -> GemmConfig { s.parse().unwrap() };
    let default = c("wg=8x16 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let other = c("wg=16x16 tile=8x8 k=8 slm=2 unroll=1 vec=4");
    let found = |d: f64, o: f64| tuner::Searched {
        timings: vec![(default, d), (other, o)],
        errors: Vec::new(),
    };
    let m = tuner::DEFAULT_MARGIN;
    assert_eq!(tuner::winner(&found(1.0, 1.0 - m / 2.0), &default), Some(default));
    assert_eq!(tuner::winner(&found(1.0, 1.0 - 2.0 * m), &default), Some(other));
    assert_eq!(tuner::winner(&found(1.0, 1.5), &default), Some(default));
    assert_eq!(tuner::winner(&found(1.0, 0.99), &other), Some(other));
    let untimed = tuner::Searched { timings: vec![(other, 2.0)], errors: Vec::new() };
    assert_eq!(tuner::winner(&untimed, &default), Some(other));
    assert_eq!(tuner::winner(&tuner::Searched::default(), &default), None);
}

/// Issue 26: at 1000^3 the exhaustive subset's best on the H100 was the first seed split in
/// two (1.04x cuBLAS), which the search never timed (it reached 0.77 of it). The search now
/// times each seed also with the split-K setting the first choice would give it, among its
/// first blockings.
#[test]
fn the_search_times_the_seeds_split_to_fill_the_units() {
    let t = Target::h100();
    let mnk = [1000, 1000, 1000];
    let split: GemmConfig = "wg=8x16 tile=8x8 k=8 slm=2 unroll=1 vec=4 split=2".parse().unwrap();
    assert!(tuner::fills(&split, mnk, &t) && !tuner::fills(&t.seeds[0], mnk, &t));
    let found = tuner::search(mnk, &t, 24, &mut |_| Ok(1.0));
    let at = found.timings.iter().position(|(c, _)| *c == split);
    assert!(at.is_some_and(|i| i < 12), "{:?}", found.timings);
}

/// Issue 26 item 3: a GEMM whose A and B are both contiguous along K (A row-major, B
/// transposed) takes the target's K-major seed, k-tile 8 into padded tiles (4096^3 B^T on
/// the H200: 0.91x cuBLAS against 0.86x at k-tile 16), split like any seed where its tiles
/// leave SMs idle; the other transpositions keep the large seed.
#[test]
fn k_major_problems_take_the_k_major_seed() {
    let t = Target::h100();
    let k_major = |mnk| Dims { mnk, batch: 1, k_major: true, mn_major: false };
    let square = tuner::first_choice(k_major([4096; 3]), &t);
    assert_eq!(square, t.k_major_seeds[0], "{square}");
    assert_eq!(square.k_tile, 8);
    assert_eq!(tuner::first_choice([4096; 3], &t), t.large_seeds[0]);
    let deep = tuner::first_choice(k_major([512, 512, 32768]), &t);
    assert_eq!((GemmConfig { split_k: 1, ..deep }, deep.split_k), (t.k_major_seeds[0], 16));
    // The cpu device has none: the same choice either way.
    let cpu = Target::cpu(4);
    assert_eq!(tuner::first_choice(k_major([512; 3]), &cpu), tuner::first_choice([512; 3], &cpu));
    // The search times the K-major seed too.
    let mut timed = Vec::new();
    tuner::search(k_major([4096; 3]), &t, 4, &mut |c| {
        timed.push(*c);
        Ok(1.0)
    });
    assert_eq!(timed[0], t.k_major_seeds[0], "{timed:?}");
}
