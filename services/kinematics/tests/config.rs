//! The `cell-kinematics` binary validates its configuration at start-up: a bad file fails with
//! exit code 2 and names every offending key; the shipped configs pass.

const EXE: &str = env!("CARGO_BIN_EXE_cell-kinematics");

fn run_check(toml: &str) -> (i32, String) {
    common::testing::check_config(EXE, &[], toml)
}

#[test]
fn bad_config_fails_naming_every_key() {
    let (code, err) = run_check(
        "[cell]\nid = \"bad/id\"\nbogus = 1\n[kinematics]\nnot_a_key = 3\n[arm]\nmodel = \"irb999\"\n[nonsense]\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in [
        "cell.id",
        "cell.bogus",
        "kinematics.not_a_key",
        "arm.model",
        "nonsense",
    ] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
}

#[test]
fn shipped_configs_are_valid() {
    common::testing::assert_shipped_configs_valid(EXE, &[]);
}

#[test]
fn lead_bounds_out_of_range_fail_naming_each_key() {
    let (code, err) = run_check(
        "[kinematics]\nmax_lead_joint_deg = 0.0\nmax_lead_tcp_mm = -5.0\nmax_lead_tcp_deg = 400.0\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in [
        "kinematics.max_lead_joint_deg",
        "kinematics.max_lead_tcp_mm",
        "kinematics.max_lead_tcp_deg",
    ] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
    let (code, err) = run_check(
        "[kinematics]\nmax_lead_joint_deg = 10.0\nmax_lead_tcp_mm = 20.0\nmax_lead_tcp_deg = 10.0\n",
    );
    assert_eq!(code, 0, "{err}");
}
