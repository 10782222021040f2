//! The tensor-core tuner's model (kiln_gen::tc_tune): a deterministic ranking of blockings
//! that all fit the target, wave quantisation, registers that spill left out, and the
//! blocking's text form.

use kiln_gen::tc_tune::{estimate, first_choice, rank, registers};
use kiln_gen::tuner::Target;
use kiln_gen::TcConfig;

#[test]
fn tc_rank_is_deterministic_sorted_and_fits() {
    let h100 = Target::h100();
    for mnk in [[4096, 4096, 4096], [256, 256, 256], [100352, 64, 576], [37, 29, 45]] {
        let r = rank(mnk, &h100);
        assert!(!r.is_empty(), "{mnk:?}");
        assert_eq!(r, rank(mnk, &h100), "{mnk:?}");
        assert!(r.windows(2).all(|w| w[0].cycles <= w[1].cycles), "{mnk:?}");
        for e in &r {
            e.config.validate().unwrap();
            assert!(e.regs <= h100.max_regs_per_item && e.config.local_bytes() <= 227 * 1024);
            assert!(e.groups_per_unit >= 1 && e.waves >= 1);
        }
        assert_eq!(first_choice(mnk, &h100), r[0].config);
    }
}

#[test]
fn tc_rank_big_problems_take_big_tiles_small_ones_fill_the_machine() {
    let h100 = Target::h100();
    let big = first_choice([4096, 4096, 4096], &h100);
    assert!(big.bm * big.bn >= 128 * 128, "{big}");
    // 512 x 512: a 128 x 128 blocking makes 16 work-groups for 132 SMs; the model's choice
    // makes at least 64.
    let small = first_choice([512, 512, 4096], &h100);
    assert!((512 / small.bm) * (512 / small.bn) >= 64, "{small}");
    let rank_of = |mnk, c: &TcConfig| rank(mnk, &h100).iter().position(|e| e.config == *c);
    assert!(rank_of([512, 512, 4096], &TcConfig::default()) > Some(0));
}

#[test]
fn tc_estimate_counts_whole_waves_and_refuses_spills() {
    let h100 = Target::h100();
    let c = TcConfig::default();
    let one = estimate(&c, [128, 128, 1024], &h100).unwrap();
    let per_sm = one.groups_per_unit as u64;
    // Exactly one full wave of 128 x 128 tiles, then one tile more: twice the time.
    let full = [128 * 132 * per_sm, 128, 1024];
    let over = [128 * (132 * per_sm + 1), 128, 1024];
    let (a, b) = (estimate(&c, full, &h100).unwrap(), estimate(&c, over, &h100).unwrap());
    assert_eq!((a.waves, b.waves), (1, 2));
    assert_eq!(b.cycles, 2.0 * a.cycles);
    // A 128 x 64 warp tile needs 256 f32 accumulator registers a work-item: it would spill.
    let spills = TcConfig { bm: 128, bn: 64, bk: 32, warps_m: 1, warps_n: 1, stages: 2 };
    spills.validate().unwrap();
    assert!(registers(&spills) > h100.max_regs_per_item);
    assert_eq!(estimate(&spills, [4096, 4096, 4096], &h100), None);
}

#[test]
fn tc_configs_print_and_parse() {
    for c in TcConfig::candidates(4096, 4096, 4096) {
        assert_eq!(c.to_string().parse::<TcConfig>(), Ok(c));
    }
    for (text, why) in [
        ("block=128x128x32 warps=2x4", "`stages=` is missing"),
        ("block=128x128 warps=2x4 stages=2", "wrong number of sizes"),
        ("block=128x128x24 warps=2x4 stages=2", "multiple of 16"),
        ("block=128x128x32 warps=2x4 stages=2 vec=4", "unknown key `vec`"),
    ] {
        let e = text.parse::<TcConfig>().unwrap_err();
        assert!(e.contains(why), "{text}: {e}");
    }
}
