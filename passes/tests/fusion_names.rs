//! Fusion specs that name parameters by kernel and parameter name: resolved to the same
//! positions, in code and in TOML; unknown and ambiguous names refused, naming them.

use kiln_ir::parse_module;
use kiln_passes::fusion::{FusionSpec, ParamRef};

const SRC: &str = "
kernel add(a: ptr<global, f32>, b: ptr<global, f32>, t: ptr<global, f32>) { }
kernel mul(t: ptr<global, f32>, c: ptr<global, f32>) { }
";

const HEAD: &str = "kernels = [\"add\", \"mul\", \"add\"]\n\
                    ndranges = [{ global = [4] }, { global = [4] }, { global = [4] }]\n";

#[test]
fn names_resolve_to_the_positions() {
    let m = parse_module(SRC).unwrap();
    let text = format!(
        "{HEAD}identical = [[[0, \"t\"], [\"mul\", \"t\"]], [[\"mul\", 1], [2, \"b\"]]]\n\
         promote = [{{ entry = \"mul\", param = \"t\", to = \"private\" }}]\n\
         constants = []\n"
    );
    let named = FusionSpec::from_toml_for(&text, &m).unwrap();
    let positional = FusionSpec::from_toml(&format!(
        "{HEAD}identical = [[[0, 2], [1, 0]], [[1, 1], [2, 1]]]\n\
         promote = [{{ entry = 1, param = 0, to = \"private\" }}]\n"
    ))
    .unwrap();
    assert_eq!(named, positional);
    assert_eq!(named.param(&m, "mul", "c").unwrap(), ParamRef::new(1, 1));
}

#[test]
fn unknown_and_ambiguous_names_are_refused_naming_them() {
    let m = parse_module(SRC).unwrap();
    let err = |group: &str| {
        let text = format!("{HEAD}identical = [{group}]\n");
        FusionSpec::from_toml_for(&text, &m).unwrap_err().to_string()
    };
    assert_eq!(
        err("[[\"add\", \"t\"], [1, 0]]"),
        "invalid fusion spec: kernel `add` is entries 0 and 2 of the list: name the entry by its \
         index"
    );
    assert_eq!(
        err("[[\"sub\", 0], [1, 0]]"),
        "invalid fusion spec: kernel `sub` is not in the list (kernels: add, mul, add)"
    );
    assert_eq!(
        err("[[1, \"x\"], [0, 0]]"),
        "invalid fusion spec: kernel `mul` (entry 1) has no parameter `x` (parameters: t, c)"
    );
    // Without the module a parameter name cannot be resolved: refused, saying so.
    let text = format!("{HEAD}identical = [[[1, \"t\"], [0, 2]]]\n");
    let e = FusionSpec::from_toml(&text).unwrap_err().to_string();
    assert!(e.contains("parameter `t` of entry 1 is named") && e.contains("from_toml_for"), "{e}");
}
