//! The `cell-robot-io` binary validates its configuration at start-up: a bad file fails with
//! exit code 2 and names every offending key; the shipped configs pass.

const EXE: &str = env!("CARGO_BIN_EXE_cell-robot-io");

fn run_check(toml: &str) -> (i32, String) {
    common::testing::check_config(EXE, &[], toml)
}

#[test]
fn bad_config_fails_naming_every_key() {
    let (code, err) = run_check(
        "[cell]\nid = \"bad/id\"\nbogus = 1\n[robot_io]\nnot_a_key = 3\n[arm]\nmodel = \"irb999\"\n[nonsense]\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in [
        "cell.id",
        "cell.bogus",
        "robot_io.not_a_key",
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
fn bad_egm_config_names_every_key() {
    let (code, err) = run_check(
        "[robot_io]\ndriver = \"egm\"\ncycle_ms = 4.0\nmax_accel_deg_s2 = [1000.0, 1000.0, -5.0, 1000.0, 1000.0, 1000.0]\n\
         [robot_io.egm]\nbind = \"localhost-6510\"\nsilence_timeout_ms = 5.0\nbogus = true\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in [
        "robot_io.max_accel_deg_s2[2]",
        "robot_io.egm.bind",
        "robot_io.egm.silence_timeout_ms",
        "robot_io.egm.bogus",
    ] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
    let (code, err) = run_check("[robot_io]\ndriver = \"egn\"\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("robot_io.driver"), "{err}");
}

#[test]
fn egm_config_with_defaults_is_valid() {
    let (code, err) = run_check(
        "[robot_io]\ndriver = \"egm\"\n[robot_io.egm]\nbind = \"127.0.0.1:6510\"\nsend_speed_ref = false\n",
    );
    assert_eq!(code, 0, "{err}");
}
