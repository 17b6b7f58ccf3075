//! The `cell-control` binary validates its configuration at start-up: a bad file fails with
//! exit code 2 and names every offending key; the shipped configs pass.

const EXE: &str = env!("CARGO_BIN_EXE_cell-control");

fn run_check(toml: &str) -> (i32, String) {
    common::testing::check_config(EXE, &[], toml)
}

#[test]
fn bad_config_fails_naming_every_key() {
    let (code, err) = run_check(
        "[cell]\nid = \"bad/id\"\nbogus = 1\n[control]\nnot_a_key = 3\n[arm]\nmodel = \"irb999\"\n[nonsense]\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in ["cell.id", "cell.bogus", "control.not_a_key", "nonsense"] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
}

#[test]
fn shipped_configs_are_valid() {
    common::testing::assert_shipped_configs_valid(EXE, &[]);
}
