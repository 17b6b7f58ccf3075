#![allow(clippy::unwrap_used)]

use super::*;
use crate::world::{Ramp, SurfaceKind, SurfaceParams, Trigger};
use serde_json::json;

/// Tool pointing down in front of the IRB 120 (default tool: TCP = tool0).
const Q_DOWN: [f64; 6] = [0.0, 0.2, 0.1, 0.0, std::f64::consts::FRAC_PI_2 - 0.3, 0.0];

fn tcp_z(q: &[f64; 6]) -> f64 {
    Arm::irb120().fk(q).unwrap().translation.z
}

fn table(z: f64, motion: Option<Ramp>) -> SurfaceParams {
    SurfaceParams {
        name: "table".into(),
        kind: SurfaceKind::Plane,
        point_m: Some([0.0, 0.0, z]),
        normal: Some([0.0, 0.0, 1.0]),
        stiffness_n_per_m: 2e4,
        damping_n_s_per_m: 0.0,
        mu: 0.0,
        motion,
        ..Default::default()
    }
}

fn scenario(cfg: WorldConfig, plant: bool) -> Scenario {
    Scenario::new(
        cfg,
        "test",
        Arm::irb120(),
        plant,
        PlantRuntime::default(),
        7,
    )
    .unwrap()
}

fn no_files(p: &str) -> Result<(String, String), String> {
    Err(format!("{p}: no such file"))
}

fn set(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

// ---- key paths -------------------------------------------------------------------------

#[test]
fn set_path_walks_objects_and_lists() {
    let mut t = json!({"a": {"b": [1.0, {"c": 2.0}], "n": null}, "x": 3});
    set_path(&mut t, "a.b.0", json!(5.0)).unwrap();
    set_path(&mut t, "a.b.1.c", json!(6.0)).unwrap();
    set_path(&mut t, "a.b[1].c", json!(7.0)).unwrap();
    set_path(&mut t, "a.n", json!({"k": 1})).unwrap();
    set_path(&mut t, "a.b.2", json!("appended")).unwrap();
    set_path(&mut t, "x", json!([1, 2])).unwrap();
    assert_eq!(
        t,
        json!({"a": {"b": [5.0, {"c": 7.0}, "appended"], "n": {"k": 1}}, "x": [1, 2]})
    );
}

#[test]
fn set_path_errors_name_the_problem() {
    let t0 = json!({"a": {"b": [1.0], "n": null}, "x": 3});
    let err = |p: &str| {
        let mut t = t0.clone();
        let e = set_path(&mut t, p, json!(0)).unwrap_err();
        assert_eq!(t, t0, "{p}: a failed set changes nothing");
        e
    };
    let e = err("a.zz");
    assert!(
        e.contains("unknown key `zz`") && e.contains("keys there: b, n"),
        "{e}"
    );
    assert!(err("q").contains("in the top level"));
    assert!(err("a.b.5").contains("out of range"));
    assert!(
        err("a.b.1.c").contains("out of range"),
        "append only at the end"
    );
    assert!(err("a.b.k").contains("not an index"));
    assert!(err("a.n.k").contains("is not set"));
    assert!(err("x.y").contains("is a value"));
    assert!(err("a..b").contains("empty key segment"));
    assert!(err("a.b[0").contains("unclosed"));
    assert!(err("").contains("empty"));
}

#[test]
fn apply_set_changes_scenario_and_plant_keys() {
    let cfg = WorldConfig {
        surfaces: vec![table(0.2, None)],
        ..Default::default()
    };
    let rt = PlantRuntime::default();
    let (c, r) = apply_set(
        &cfg,
        &rt,
        &set(json!({
            "surfaces.0.stiffness_n_per_m": 1e5,
            "rc_plant.static_friction": [2.0, 8.0],
            "surfaces.0.motion": {"velocity_m_s": [0.0, 0.0, -0.0065], "start_s": 1.0,
                                   "duration_s": 3.0, "trigger": "contact"},
            "hand.trigger": "contact",
            "plant.command_timeout_ms": 60,
        })),
    )
    .unwrap();
    assert_eq!(c.surfaces[0].stiffness_n_per_m, 1e5);
    assert_eq!(c.rc_plant.static_friction, [2.0, 8.0]);
    assert_eq!(c.surfaces[0].motion.unwrap().trigger, Trigger::Contact);
    assert_eq!(c.hand.trigger, Trigger::Contact);
    assert_eq!(r.command_timeout_ms, 60.0);
    // Untouched keys keep their values.
    assert_eq!(c.surfaces[0].point_m, Some([0.0, 0.0, 0.2]));
    assert_eq!(c.rc_plant.coulomb_friction, cfg.rc_plant.coulomb_friction);
    // Appending a surface (missing keys take their defaults).
    let (c, _) = apply_set(
        &cfg,
        &rt,
        &set(
            json!({"surfaces.1": {"kind": "sphere", "center_m": [0.4, 0.0, 0.1],
                                   "radius_m": 0.05}}),
        ),
    )
    .unwrap();
    assert_eq!(c.surfaces.len(), 2);
    assert_eq!(c.surfaces[1].stiffness_n_per_m, 2e4);
}

#[test]
fn apply_set_reports_every_bad_key() {
    let cfg = WorldConfig {
        surfaces: vec![table(0.2, None)],
        ..Default::default()
    };
    let e = apply_set(
        &cfg,
        &PlantRuntime::default(),
        &set(json!({
            "surfaces.0.stiff": 1.0,
            "surfaces.0.mu": "slippery",
            "rc_plant.nope": 1,
            "plant.enabled": true,
            "plant.timeout": 5,
        })),
    )
    .unwrap_err();
    let has = |k: &str, what: &str| {
        assert!(
            e.iter().any(|m| m.starts_with(k) && m.contains(what)),
            "{k} / {what} missing in {e:#?}"
        )
    };
    has("surfaces.0.stiff:", "unknown key `stiff`");
    has("surfaces.0.stiff:", "stiffness_n_per_m");
    has("surfaces.0.mu:", "invalid type");
    has("rc_plant.nope:", "unknown key");
    has("plant.enabled:", "fixed at start-up");
    has("plant.timeout:", "command_timeout_ms");
    assert_eq!(e.len(), 5);
    // Range problems come from the scenario's own validation, with their keys.
    let e = apply_set(
        &cfg,
        &PlantRuntime::default(),
        &set(
            json!({"surfaces.0.mu": -1.0, "plant.command_timeout_ms": 0.0,
                    "rc_plant.static_friction": [0.1, 0.1]}),
        ),
    )
    .unwrap_err();
    for k in [
        "surfaces[0].mu",
        "plant.command_timeout_ms",
        "rc_plant.static_friction[0]",
    ] {
        assert!(e.iter().any(|m| m.starts_with(k)), "{k}: {e:#?}");
    }
}

#[test]
fn requests_parse_strictly() {
    assert_eq!(Request::parse(b"").unwrap(), Request::default());
    assert_eq!(Request::parse(b"  \n").unwrap(), Request::default());
    assert_eq!(Request::parse(b"{}").unwrap(), Request::default());
    let r = Request::parse(br#"{"reset": true, "set": {"a": 1}}"#).unwrap();
    assert!(r.reset && r.set.is_some() && !r.arm);
    for bad in [
        &b"not json"[..],
        br#"{"relaod": "x.toml"}"#,
        br#"{"reset": "yes"}"#,
        br#"[1, 2]"#,
        br#"{"load": "a.toml", "load_toml": "x = 1"}"#,
    ] {
        assert!(
            Request::parse(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let e = Request::parse(br#"{"relaod": 1}"#).unwrap_err();
    assert!(e.contains("relaod") && e.contains("`load`"), "{e}");
    let e = Request::parse(b"not json").unwrap_err();
    assert!(e.contains("\"load_toml\""), "{e}");
}

// ---- time ------------------------------------------------------------------------------

#[test]
fn effort_times_out() {
    assert_eq!(
        effort_or_zero(Some(([1.0, 2.0], 0.039)), 40.0),
        ([1.0, 2.0], false)
    );
    assert_eq!(
        effort_or_zero(Some(([1.0, 2.0], 0.041)), 40.0),
        ([0.0, 0.0], true)
    );
    assert_eq!(effort_or_zero(None, 40.0), ([0.0, 0.0], true));
    assert!(effort_or_zero(Some(([1.0, 2.0], f64::NAN)), 40.0).1);
    // A 60 Hz law (16.7 ms between commands) is never starved by the default.
    let d = PlantRuntime::default().command_timeout_ms;
    assert!(d >= 2.0 * 1000.0 / 60.0, "{d}");
    assert!(!effort_or_zero(Some(([0.0, 1.0], 0.0167)), d).1);
}

#[test]
fn one_clock_for_world_and_plant() {
    let mut s = scenario(WorldConfig::default(), true);
    let mut last = None;
    for k in 1..=2500u64 {
        let out = s.tick(&Q_DOWN, &[0.0; 6], Some(([0.0, 20.0], 0.0)));
        let p = out.plant.unwrap();
        assert_eq!(out.t, k as f64 / 1000.0);
        assert_eq!(p.state.t, out.t, "PlantState.t is scenario time");
        assert!(!p.command_stale);
        last = Some(p);
    }
    assert_eq!(s.ticks(), 2500);
    assert_eq!(s.time_s(), 2.5);
    let p = last.unwrap();
    assert!(p.state.in_contact, "20 N drove the hand to the surface");
    // The published wrist force carries the noise; the truth does not.
    assert_ne!(p.wrist_force_measured, p.state.wrist_force);
    // A stale command (older than the 40 ms timeout) means zero effort.
    let out = s.tick(&Q_DOWN, &[0.0; 6], Some(([0.0, 20.0], 0.05)));
    let p = out.plant.unwrap();
    assert!(p.command_stale);
    assert_eq!(p.state.torque_applied, [0.0, 0.0]);
}

#[test]
fn wrist_force_noise_has_the_configured_spread() {
    let mut s = scenario(WorldConfig::default(), true);
    let mut d = Vec::new();
    for _ in 0..4000 {
        let p = s.tick(&Q_DOWN, &[0.0; 6], None).plant.unwrap();
        d.push(p.wrist_force_measured[0] - p.state.wrist_force[0]);
    }
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert!((sd - 0.05).abs() < 0.005, "{sd}");
    assert!(mean.abs() < 0.005, "{mean}");
    // Switched off: the measurement is the truth.
    let mut r = s.runtime();
    r.wrist_force_noise_std_n = 0.0;
    let mut quiet = Scenario::new(WorldConfig::default(), "t", Arm::irb120(), true, r, 1).unwrap();
    let p = quiet.tick(&Q_DOWN, &[0.0; 6], None).plant.unwrap();
    assert_eq!(p.wrist_force_measured, p.state.wrist_force);
}

#[test]
fn contact_triggered_world_ramp_runs_on_scenario_time() {
    // R&C Fig. 8 on the arm: the table moves away at 6.5 mm/s 0.5 s after the tool touches it.
    let q_touch = Q_DOWN;
    let mut q_far = Q_DOWN;
    q_far[1] -= 0.2;
    let z = tcp_z(&q_touch);
    assert!(tcp_z(&q_far) > z + 0.01, "q_far is above the table");
    let ramp = Ramp {
        velocity_m_s: [0.0, 0.0, -0.0065],
        start_s: 0.5,
        duration_s: 1.0,
        trigger: Trigger::Contact,
    };
    let cfg = WorldConfig {
        gravity_m_s2: [0.0; 3],
        surfaces: vec![table(z + 0.0005, Some(ramp))],
        ..Default::default()
    };
    let mut s = scenario(cfg, false);
    // 3 s without contact: the table stays where it is.
    for _ in 0..3000 {
        let out = s.tick(&q_far, &[0.0; 6], None);
        assert!(!out.truth.unwrap().in_contact);
    }
    let surf = &s.summary()["surfaces"][0];
    assert_eq!(surf["trigger"]["armed"], json!(true));
    assert_eq!(surf["offset_m"], json!([0.0, 0.0, 0.0]));
    // Contact at t = 3.001 s: 10 N; the ramp starts at 3.501 s.
    let out = s.tick(&q_touch, &[0.0; 6], None);
    let t_contact = out.t;
    assert!((out.truth.unwrap().contact_force_base[2] - 10.0).abs() < 1e-6);
    let mut f = 0.0;
    while s.time_s() < t_contact + 0.7 - 1e-9 {
        let out = s.tick(&q_touch, &[0.0; 6], None);
        f = out.truth.unwrap().contact_force_base[2];
        if out.t <= t_contact + 0.5 + 1e-9 {
            assert!((f - 10.0).abs() < 1e-6, "held until the ramp starts");
        }
    }
    // 0.2 s of ramp: 1.3 mm lower → the 0.5 mm contact is lost.
    assert_eq!(f, 0.0);
    let sm = s.summary();
    let surf = &sm["surfaces"][0];
    assert_eq!(surf["trigger"]["origin_s"], json!(t_contact));
    assert!((surf["offset_m"][2].as_f64().unwrap() + 0.0013).abs() < 1e-9);
    // Reset: time 0, the table back home, trigger armed.
    s.apply(&Request::parse(br#"{"reset": true}"#).unwrap(), &no_files)
        .unwrap();
    let sm = s.summary();
    assert_eq!(sm["sim_time_s"], json!(0.0));
    assert_eq!(sm["surfaces"][0]["trigger"]["armed"], json!(true));
    assert_eq!(sm["surfaces"][0]["offset_m"], json!([0.0, 0.0, 0.0]));
    let out = s.tick(&q_touch, &[0.0; 6], None);
    assert!((out.truth.unwrap().contact_force_base[2] - 10.0).abs() < 1e-6);
}

#[test]
fn truth_updates_every_base_tick_within_an_egm_cycle() {
    // The servo is advanced per 1 ms tick and the truth evaluated per tick: while the arm
    // presses into the table, consecutive ticks of the same 4 ms EGM cycle see different
    // contact forces (before, the truth was refreshed once per cycle).
    use crate::controller::{Controller, SessionParams};
    let z = tcp_z(&Q_DOWN);
    let cfg = WorldConfig {
        surfaces: vec![table(z + 0.002, None)],
        ..Default::default()
    };
    let mut s = scenario(cfg, false);
    let mut ctl = Controller::new(s.world().servo(Q_DOWN), SessionParams::ALWAYS_ON);
    // A reference 3 mm lower (joint 2 forward) as a reply from robot-io.
    let mut target = Q_DOWN;
    target[1] += 0.01;
    let deg: Vec<f64> = target.iter().map(|v| v.to_degrees()).collect();
    ctl.apply_reply(&crate::wire::egm::sensor_message(0, 0, &deg));
    let mut forces = Vec::new();
    for k in 0..200u64 {
        if k % 4 == 0 {
            ctl.begin_cycle(0.004);
        }
        let (q, qd) = ctl.advance(BASE_TICK_S);
        let t = s.tick(&q, &qd, None).truth.unwrap();
        forces.push(t.contact_force_base[2]);
    }
    // Once moving (after the transport delay), every tick within a cycle differs.
    let moving = &forces[40..80];
    for w in moving.windows(2) {
        assert!((w[1] - w[0]).abs() > 1e-9, "{moving:?}");
    }
    assert!(forces[199] > forces[0], "pressed further in");
}

// ---- the RPC ---------------------------------------------------------------------------

#[test]
fn bad_requests_change_nothing() {
    let cfg = WorldConfig {
        surfaces: vec![table(0.2, None)],
        ..Default::default()
    };
    let mut s = scenario(cfg, true);
    for _ in 0..100 {
        s.tick(&Q_DOWN, &[0.0; 6], Some(([0.0, 10.0], 0.0)));
    }
    let before = s.summary();
    let files = |p: &str| -> Result<(String, String), String> {
        match p {
            "broken.toml" => Ok(("[[surfaces]]\nkind = \"plane\"\n".into(), p.into())),
            "bad-syntax.toml" => Ok(("gravity_m_s2 = [".into(), p.into())),
            _ => Err(format!("{p}: no such file")),
        }
    };
    for body in [
        json!({"load": "missing.toml"}),
        json!({"load": "broken.toml"}),
        json!({"load": "bad-syntax.toml", "reset": true}),
        json!({"load_toml": "[tool]\nmass_kg = -1.0", "reset": true}),
        json!({"set": {"surfaces.0.mu": 9.0}, "reset": true}),
        json!({"set": {"surfaces.0.nope": 1.0}, "arm": true}),
        json!({"set": {"plant.command_timeout_ms": -5}}),
    ] {
        let req = Request::parse(body.to_string().as_bytes()).unwrap();
        let e = s.apply(&req, &files).unwrap_err();
        assert!(!e.is_empty());
        assert_eq!(s.summary(), before, "{body} changed the scenario: {e:?}");
    }
    let e = s
        .apply(
            &Request::parse(br#"{"load": "broken.toml"}"#).unwrap(),
            &files,
        )
        .unwrap_err();
    assert!(
        e.iter()
            .any(|m| m.starts_with("surfaces[0].point_m: required")),
        "{e:?}"
    );
}

#[test]
fn set_is_live_and_load_resets() {
    let cfg = WorldConfig {
        surfaces: vec![table(0.2, None)],
        ..Default::default()
    };
    let mut s = scenario(cfg, true);
    for _ in 0..500 {
        s.tick(&Q_DOWN, &[0.0; 6], Some(([0.0, 20.0], 0.0)));
    }
    let q_before = s.summary()["rc_plant"]["state"]["q"].clone();
    let applied = s
        .apply(
            &Request::parse(
                br#"{"set": {"surfaces.0.stiffness_n_per_m": 1e5,
                             "rc_plant.static_friction": [2.0, 8.0],
                             "servo.bandwidth_hz": [5, 5, 5, 5, 5, 5],
                             "plant.command_timeout_ms": 60}}"#,
            )
            .unwrap(),
            &no_files,
        )
        .unwrap();
    assert_eq!(applied.servo.map(|p| p.bandwidth_hz), Some([5.0; 6]));
    let sm = s.summary();
    assert_eq!(sm["sim_time_s"], json!(0.5), "a set keeps time");
    assert_eq!(
        sm["rc_plant"]["state"]["q"], q_before,
        "and the plant's state"
    );
    assert_eq!(sm["surfaces"][0]["stiffness_n_per_m"], json!(1e5));
    assert_eq!(
        sm["rc_plant"]["params"]["static_friction"],
        json!([2.0, 8.0])
    );
    assert_eq!(sm["plant"]["command_timeout_ms"], json!(60.0));
    assert_eq!(s.runtime().command_timeout_ms, 60.0);
    // A plain query changes nothing and applies no servo change.
    assert_eq!(
        s.apply(&Request::default(), &no_files).unwrap(),
        Applied::default()
    );
    // Load (from a "file") replaces the scenario and restarts time; the plant is back at its
    // initial pose; the run-time settings persist unless set.
    let text = "[[surfaces]]\nkind = \"sphere\"\ncenter_m = [0.4, 0.0, 0.1]\nradius_m = 0.05\n";
    let files = |p: &str| -> Result<(String, String), String> {
        (p == "scenarios/ball.toml")
            .then(|| (text.to_string(), format!("/cfg/{p}")))
            .ok_or_else(|| "no such file".to_string())
    };
    s.apply(
        &Request::parse(br#"{"load": "scenarios/ball.toml"}"#).unwrap(),
        &files,
    )
    .unwrap();
    let sm = s.summary();
    assert_eq!(sm["source"], json!("/cfg/scenarios/ball.toml"));
    assert_eq!(sm["sim_time_s"], json!(0.0));
    assert_eq!(sm["surfaces"][0]["kind"], json!("sphere"));
    assert_eq!(sm["rc_plant"]["state"]["q"], json!([0.0, 0.5]));
    assert_eq!(sm["plant"]["command_timeout_ms"], json!(60.0));
    // load_toml with a set on top and a reset.
    s.apply(
        &Request::parse(
            br#"{"load_toml": "[tool]\nmass_kg = 1.0", "set": {"tool.mass_kg": 2.0},
                 "reset": true}"#,
        )
        .unwrap(),
        &no_files,
    )
    .unwrap();
    let sm = s.summary();
    assert_eq!(sm["config"]["tool"]["mass_kg"], json!(2.0));
    assert_eq!(sm["source"], json!("inline TOML"));
}

#[test]
fn reset_restores_the_plant_and_arm_rearms() {
    let mut cfg = WorldConfig::default();
    cfg.rc_plant.surface.motion = Some(crate::world::PlanarRamp {
        velocity_m_s: [0.0065, 0.0],
        start_s: 0.2,
        duration_s: 1.0,
        trigger: Trigger::Contact,
    });
    let mut s = scenario(cfg, true);
    for _ in 0..1500 {
        s.tick(&Q_DOWN, &[0.0; 6], Some(([0.0, 20.0], 0.0)));
    }
    let sm = s.summary();
    let st = &sm["rc_plant"]["state"];
    assert_eq!(st["trigger"]["armed"], json!(false));
    assert!(st["surface_offset_m"][0].as_f64().unwrap() > 0.0, "{st}");
    s.apply(&Request::parse(br#"{"arm": true}"#).unwrap(), &no_files)
        .unwrap();
    let sm = s.summary();
    assert_eq!(sm["rc_plant"]["state"]["trigger"]["armed"], json!(true));
    assert_eq!(sm["sim_time_s"], json!(1.5), "arm keeps time");
    s.apply(&Request::parse(br#"{"reset": true}"#).unwrap(), &no_files)
        .unwrap();
    let sm = s.summary();
    let st = &sm["rc_plant"]["state"];
    assert_eq!(st["q"], json!([0.0, 0.5]));
    assert_eq!(st["t_s"], json!(0.0));
    assert_eq!(st["in_contact"], json!(false));
    assert_eq!(sm["sim_time_s"], json!(0.0));
}
