//! The `cell` binary validates its configuration at start-up: a bad file fails with
//! exit code 2 and names every offending key; the shipped configs pass.

const EXE: &str = env!("CARGO_BIN_EXE_cell");

fn run_check(toml: &str) -> (i32, String) {
    common::testing::check_config(EXE, &["up"], toml)
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
    common::testing::assert_shipped_configs_valid(EXE, &["up"]);
}

#[test]
fn out_of_range_and_wrong_type_are_reported_together() {
    let (code, err) = run_check(
        "[robot_io]\ncycle_ms = 0.0\ncommand_timeout_ms = \"soon\"\n[launcher]\nservices = [\"robot-io\", \"teleporter\"]\n",
    );
    assert_eq!(code, 2, "{err}");
    for key in [
        "robot_io.cycle_ms",
        "robot_io.command_timeout_ms",
        "launcher.services[1]",
    ] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
}
