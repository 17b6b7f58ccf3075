//! The cell against its simulated hardware (`cell-sim`: an IRC5 speaking EGM over UDP and an
//! SRI M8128 / ATI Net F/T emulator fed by the world model), through the real drivers.
#![allow(clippy::unwrap_used)]
// A failed check is written `!(figure <= bound)`, so that a NaN figure fails it too.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::time::{Duration, Instant};

use common::{
    codec,
    msg::{JointCommand, SafetyReason, SafetyState, WrenchEstimate, WrenchFault},
    topic,
};
use kinematics::Arm;
use tests::{statuses, wait_for, Report, TestCell};

use tests::{sim_fault, up_all as up};

/// Mean of the next `n` valid estimates. Estimates flagged by a fault are skipped. The
/// timing flags (`Stale`, `NoPose`) come in bursts when the host stalls a process past the
/// 9 ms threshold (a CI run saw a burst of 21 in 200): that flag is correct and not what
/// these tests are about, so up to `4 n` of them are skipped (and printed); any other flag
/// (saturation, spikes, device errors) may touch at most 10 % of the estimates.
async fn mean_estimate(
    sub: &zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
    n: usize,
) -> ([f64; 3], [f64; 3], [f64; 3]) {
    while sub.try_recv().ok().flatten().is_some() {}
    let (mut fb, mut fs, mut ts) = ([0.0; 3], [0.0; 3], [0.0; 3]);
    let mut k = 0;
    let mut flagged = 0;
    let mut timing = 0;
    while k < n {
        let sample = tokio::time::timeout(Duration::from_secs(2), sub.recv_async())
            .await
            .expect("estimates flowing")
            .unwrap();
        let e: WrenchEstimate = codec::decode(&sample.payload().to_bytes()).unwrap();
        if matches!(e.fault, WrenchFault::Stale | WrenchFault::NoPose) {
            timing += 1;
            assert!(
                timing <= 4 * n,
                "the estimates stayed flagged {:?}: the stream is not keeping time",
                e.fault
            );
            continue;
        }
        if e.fault != WrenchFault::None {
            flagged += 1;
            assert!(
                flagged <= n / 10,
                "too many flagged estimates (last: {:?})",
                e.fault
            );
            continue;
        }
        for i in 0..3 {
            fb[i] += e.base.force_n[i];
            fs[i] += e.sensor.force_n[i];
            ts[i] += e.sensor.torque_nm[i];
        }
        k += 1;
    }
    if timing > 0 {
        println!("skipped {timing} estimates flagged stale on a stalled host");
    }
    let m = |v: [f64; 3]| v.map(|x| x / n as f64);
    (m(fb), m(fs), m(ts))
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

/// Stop the command stream (kill the commander — control, on the default direct chain —
/// while the robot moves): robot-io holds the measured position within 2 robot cycles of the
/// last command's deadline, says why, and the simulated robot comes to rest (the restarted
/// control comes up idle: no motion resumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_on_the_command_path_holds_the_robot() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("hold", &[]);
    let s = up(&c).await;
    let cmds = s
        .declare_subscriber(topic::JOINT_COMMAND.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .unwrap();
    let safety = s
        .declare_subscriber(topic::SAFETY_STATE.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(1024))
        .await
        .unwrap();
    let (ok, _, err) = c.cli(&["move", "420", "-120", "450", "--speed-mm-s", "150"]);
    assert!(ok, "{err}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let pid = st["control"]["pid"].as_i64().unwrap() as i32;
    // SAFETY: killing the test's own grandchild.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    let last_cmd: JointCommand =
        codec::decode(&cmds.recv_async().await.unwrap().payload().to_bytes()).unwrap();
    let mut stale: Option<SafetyState> = None;
    while let Ok(Some(sample)) = safety.try_recv() {
        let st: SafetyState = codec::decode(&sample.payload().to_bytes()).unwrap();
        if st.reason == SafetyReason::CommandStale && st.since_cycle > last_cmd.cycle {
            stale.get_or_insert(st);
        }
    }
    let stale = stale.unwrap_or_else(|| panic!("no CommandStale hold\n{}", c.log_text()));
    // Timeout = 2 cycles (8 ms): the hold starts at most 3 cycles after the cycle the last
    // command was computed from (one more for the command's own transit).
    let cycles = stale.since_cycle - last_cmd.cycle;
    assert!(cycles <= 4, "hold {cycles} cycles after the last command");
    eprintln!("hold after {cycles} robot cycles");
    // The simulated robot stops.
    let still = wait_for(Duration::from_secs(3), || async {
        let st = statuses(&s, &c.cell).await.ok()?;
        let qd = st.get("sim")?["detail"]["egm"]["qd_deg_s"]
            .as_array()?
            .clone();
        qd.iter()
            .all(|v| v.as_f64().is_some_and(|x| x.abs() < 0.01))
            .then_some(())
    })
    .await;
    assert!(still.is_some(), "the simulated robot kept moving");
}

/// 10 % EGM packet loss and 2 ms jitter on the simulated controller: the robot still moves
/// where it is told, no joint ever exceeds its speed limit, and robot-io counts the losses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packet_loss_and_jitter_never_exceed_limits() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("lossy", &[]);
    let s = up(&c).await;
    sim_fault(
        &s,
        &c,
        serde_json::json!({"packet_loss": 0.1, "jitter_ms": 2.0}),
    )
    .await;
    let js = s
        .declare_subscriber(topic::JOINT_STATE.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(8192))
        .await
        .unwrap();
    let (ok, _, err) = c.cli(&["move", "350", "150", "500", "--speed-mm-s", "250"]);
    assert!(ok, "{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut n = 0;
    while let Ok(Some(_)) = js.try_recv() {
        n += 1;
    }
    assert!(n > 300, "{n} joint states");
    let st = statuses(&s, &c.cell).await.unwrap();
    let lost = st["robot-io"]["detail"]["egm"]["lost"].as_u64().unwrap();
    assert!(lost > 0, "robot-io counted no lost packets");
    // What the emulated controller received from robot-io: speed and position limits held.
    let refs = &st["sim"]["detail"]["egm"];
    assert_eq!(refs["reference_out_of_limits"].as_u64(), Some(0));
    // The references robot-io put on the wire, on robot-io's clock (the step time its
    // supervisor used): speed and acceleration within the limits. (The simulated joints'
    // own peak is not a test: the emulated servo clamps to the same limit.)
    let sent = &st["robot-io"]["detail"]["egm"]["references"];
    let sent_speed = sent["peak_speed_ratio"].as_f64().unwrap();
    let sent_accel = sent["peak_accel_ratio"].as_f64().unwrap();
    assert!(sent["active_replies"].as_u64().unwrap() > 100, "{sent}");
    assert!(
        sent_speed <= 1.0 + 1e-6,
        "reference speed {sent_speed} × limit"
    );
    assert!(
        sent_accel <= 1.0 + 1e-6,
        "reference acceleration {sent_accel} × limit"
    );
    assert!(sent_speed > 0.5, "the move ran at speed: {sent_speed}");
    assert_eq!(sent["out_of_limits"].as_u64(), Some(0));
    let joint_peak = refs["joint_peak_speed_ratio"].as_f64().unwrap();
    // Seen on the controller's clock, a reply that jitter (or this host's scheduler) delays
    // past the next tick lands together with the following one, so one controller cycle can
    // receive two or more of robot-io's steps — each within the limit on robot-io's clock,
    // which follows the controller's `tm` (the supervisor's jittered-dt proptest proves that).
    // Reported, not asserted: under jitter robot-io's own figures above are what can be gated
    // here; what the IRC5 received is gated in a clean world
    // (`payload_identification_and_gravity_compensation`).
    let peak = refs["reference_peak_speed_ratio"].as_f64().unwrap();
    tests::report(
        Report::Figure,
        &format!(
            "under 10 % loss and 2 ms jitter: reference peak {peak:.3} × the speed limit on the \
             controller clock (not gated), joints {joint_peak:.3}; gated on robot-io's clock: \
             speed {sent_speed:.3}, acceleration {sent_accel:.3} × limit"
        ),
    );
    let target = common::msg::Pose {
        position_m: [0.35, 0.15, 0.5],
        quat_wxyz: [
            std::f64::consts::FRAC_1_SQRT_2,
            0.0,
            std::f64::consts::FRAC_1_SQRT_2,
            0.0,
        ],
    };
    cell_wait(&s, &c, &target).await;
    eprintln!("{lost} EGM packets lost");
}

/// Payload identification through the real SRI driver (raw counts, the box's decoupling),
/// with sensor bias and noise: mass within 1 %, centre of mass within 1 mm; then at rest in 20
/// random orientations the compensated force is within 0.05 N + 1 % of full scale and the
/// torque within 0.005 N·m.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_identification_and_gravity_compensation() {
    let _cell = tests::cell_lock();
    let c = TestCell::start(
        "payload",
        &[
            "sim.sri.imperfections.bias=[3.0, -2.0, 5.0, 0.1, -0.05, 0.02]",
            "sim.sri.imperfections.noise_std=[0.02, 0.02, 0.02, 0.0005, 0.0005, 0.0005]",
            // Judge the compensation itself: no dead band hiding residuals.
            "force.deadband_force_n=0.0",
            "force.deadband_torque_nm=0.0",
        ],
    );
    let s = up(&c).await;
    // What the emulated IRC5 receives, from here to the end of the test (the world is
    // clean: no EGM loss or jitter).
    let truth: std::sync::Arc<std::sync::Mutex<Vec<common::msg::SimTruth>>> = Default::default();
    let sink = truth.clone();
    let _truth_sub = s
        .declare_subscriber(topic::SIM_TRUTH.key(&c.cell.id))
        .callback(move |smp| {
            if let Ok(t) = codec::decode::<common::msg::SimTruth>(&smp.payload().to_bytes()) {
                if let Ok(mut g) = sink.lock() {
                    g.push(t);
                }
            }
        })
        .await
        .unwrap();
    let counters = |st: &std::collections::BTreeMap<String, serde_json::Value>| {
        let d = &st["robot-io"]["detail"]["safety"];
        let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("robot-io {k}: {d}"));
        // A departure ramp after a hold (a proven host stall's, which the CLI repeats) is
        // limiting by design: not the stream's own.
        let ramp = d["limited_by"]["ramp"].as_u64().unwrap_or(0);
        (
            n("limited_cycles") - ramp,
            n("aligned_cycles"),
            n("limited_after_alignment"),
        )
    };
    let before = counters(&statuses(&s, &c.cell).await.expect("status"));
    // Joint-space moves between the poses (issue 21: the Cartesian moves it made before were
    // limited ≈ 1400 times by robot-io near the wrist singularity).
    let (ok, out, err) = c.cli_repeat_after_stall(&["payload", "identify", "--speed-scale", "0.5"]);
    assert!(ok, "identify failed: {err}\n{}", c.log_text());
    let after = counters(&statuses(&s, &c.cell).await.expect("status"));
    let (limited, aligned, realigning) =
        (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    eprintln!(
        "payload identification: robot-io limited {limited} replies ({realigning} of them \
         rejoining the stream after one held in time), {aligned} held in time"
    );
    // The identification's own stream: joint moves planned by control within robot-io's
    // speed and acceleration limits (control's are at or below them, deploy/config/sim.toml),
    // which the supervisor replies unchanged. A reply held in time after a late command or a
    // lost datagram may need a limited correction or two to rejoin it (robot-io counts those
    // apart: `limited_after_alignment`, within 20 ms of robot time of the alignment); any
    // other limited reply is the stream's own, and there must be none.
    let own = limited.saturating_sub(realigning);
    let mut failures = Vec::new();
    if own != 0 {
        failures.push(format!(
            "robot-io limited the identification's own stream {own} times ({limited} limited, \
             {realigning} rejoining after {aligned} held in time)"
        ));
    }
    let id: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = id["payload"]["mass_kg"].as_f64().unwrap();
    let com: Vec<f64> = id["payload"]["com_m"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // Truth: deploy/config/scenarios/free-space.toml (0.5 kg, CoM 40 mm along sensor z).
    let com_err = norm([com[0], com[1], com[2] - 0.04]);
    if !((m - 0.5).abs() <= 0.005) {
        failures.push(format!("identified mass {m} kg (0.5)"));
    }
    if !(com_err <= 0.001) {
        failures.push(format!("CoM error {com_err} m"));
    }
    eprintln!("identified {m:.4} kg, CoM error {:.3} mm", com_err * 1e3);

    let est = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(4096))
        .await
        .unwrap();
    let arm = Arm::irb120();
    let full_scale_n = 200.0;
    let (mut worst_f, mut worst_t) = (0.0f64, 0.0f64);
    let mut seed = 12345u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 10_000) as f64 / 10_000.0
    };
    for k in 0..20 {
        // Random wrist orientations above the table, arm in front.
        let q_deg = [
            -30.0 + 60.0 * rnd(),
            -10.0 + 30.0 * rnd(),
            -20.0 + 30.0 * rnd(),
            -150.0 + 300.0 * rnd(),
            -100.0 + 200.0 * rnd(),
            -180.0 + 360.0 * rnd(),
        ];
        let pose = arm.fk(&q_deg.map(f64::to_radians)).unwrap();
        let (p, q) = kinematics::pose::pose_to_abb(&pose);
        let args: Vec<String> = ["move".to_string()]
            .into_iter()
            .chain(p.iter().chain(q.iter()).map(|v| format!("{v}")))
            .chain([
                "--speed-mm-s".into(),
                "400".into(),
                "--rot-speed-deg-s".into(),
                "120".into(),
            ])
            .collect();
        let argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let (ok, _, err) = c.cli(&argv);
        assert!(ok, "{err}");
        let target = common::msg::Pose::from_isometry(&pose);
        let cli_s = c.client().await;
        cell_wait(&cli_s, &c, &target).await;
        let (_, f, t) = mean_estimate(&est, 200).await;
        worst_f = worst_f.max(norm(f));
        worst_t = worst_t.max(norm(t));
        if !(norm(f) <= 0.05 + 0.01 * full_scale_n) {
            failures.push(format!("pose {k} {q_deg:?}: compensated force {f:?}"));
        }
        if !(norm(t) <= 0.005) {
            failures.push(format!("pose {k} {q_deg:?}: compensated torque {t:?}"));
        }
    }
    eprintln!("20 orientations: worst |F| {worst_f:.4} N, worst |T| {worst_t:.5} N·m");
    // What the IRC5 received over the identification's joint moves and the 20 Cartesian moves
    // (robot-io's own figures are recomputed from its replies and cannot see a reply spoilt
    // after them): within the speed and acceleration limits its supervisor enforces.
    let truth = truth.lock().map(|g| g.clone()).unwrap_or_default();
    let peaks = tests::received_reference_peaks(&truth);
    eprintln!("{peaks}");
    if truth.len() < 1000 {
        failures.push(format!("{} truth samples", truth.len()));
    }
    if let Err(e) = peaks.check() {
        failures.push(e);
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
}

async fn cell_wait(s: &zenoh::Session, c: &TestCell, target: &common::msg::Pose) {
    let sub = s
        .declare_subscriber(topic::TOOL_POSE.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut since: Option<Instant> = None;
    while Instant::now() < deadline {
        let Ok(Ok(sample)) =
            tokio::time::timeout(Duration::from_millis(500), sub.recv_async()).await
        else {
            continue;
        };
        let p: common::msg::ToolPose = codec::decode(&sample.payload().to_bytes()).unwrap();
        let d = norm([
            p.tcp_in_base.position_m[0] - target.position_m[0],
            p.tcp_in_base.position_m[1] - target.position_m[1],
            p.tcp_in_base.position_m[2] - target.position_m[2],
        ]);
        let v = norm(p.tcp_twist_base.linear_m_s) + norm(p.tcp_twist_base.angular_rad_s);
        if d < 5e-4 && v < 1e-3 {
            if since.get_or_insert_with(Instant::now).elapsed() > Duration::from_millis(400) {
                return;
            }
        } else {
            since = None;
        }
    }
    panic!("robot did not settle at {target:?}\n{}", c.log_text());
}

/// A known external force applied to the tool in the simulator appears in the estimate's base
/// frame within 1 %, for the SRI box in both modes and for the ATI Net F/T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_contact_force_in_base_frame_for_every_device() {
    let _cell = tests::cell_lock();
    let mut failures = Vec::new();
    for (name, sets) in [
        ("srictr", vec![]),
        (
            "srical",
            vec![
                "sensor.sri.mode=\"calibrated\"",
                "sim.sri.mode=\"calibrated\"",
            ],
        ),
        ("ati", vec!["sensor.driver=\"ati\"", "sim.sensor=\"ati\""]),
    ] {
        let c = TestCell::start(name, &sets);
        let s = up(&c).await;
        // Tare at rest (the tool's weight at this orientation goes into the bias).
        if let Err(why) = tests::tare_named_causes(&c, Duration::from_secs(10)).await {
            panic!("{name}: tare refused: {why}\n{}", c.log_text());
        }
        let est = s
            .declare_subscriber(topic::WRENCH_ESTIMATE.key(&c.cell.id))
            .with(zenoh::handlers::FifoChannel::new(4096))
            .await
            .unwrap();
        let applied = [12.0, -7.5, 20.0];
        sim_fault(
            &s,
            &c,
            serde_json::json!({"external_force_base_n": applied}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (fb, _, _) = mean_estimate(&est, 200).await;
        let err = norm([fb[0] - applied[0], fb[1] - applied[1], fb[2] - applied[2]]);
        eprintln!(
            "{name}: base-frame error {:.4} N of {:.2} N",
            err,
            norm(applied)
        );
        if !(err <= 0.01 * norm(applied)) {
            failures.push(format!("{name}: estimate {fb:?} vs applied {applied:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Unplug the sensor (the emulator's server goes away): the estimate is flagged `Stale`
/// within about 10 ms; plug it back: the driver reconnects by itself and valid estimates
/// resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unplugged_sensor_is_flagged_stale_and_reconnects() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("unplug", &[]);
    let s = up(&c).await;
    if let Err(why) = tests::tare_named_causes(&c, Duration::from_secs(10)).await {
        panic!("tare refused: {why}\n{}", c.log_text());
    }
    let st = statuses(&s, &c.cell).await.unwrap();
    let reconnects_before = st["sensor"]["detail"]["reconnects"].as_u64().unwrap();
    let est = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(16384))
        .await
        .unwrap();
    // Unplug only once valid estimates flow (after a tare the filter settles first).
    let flowing = wait_for(Duration::from_secs(10), || async {
        let sample = est.recv_async().await.ok()?;
        let e: WrenchEstimate = codec::decode(&sample.payload().to_bytes()).ok()?;
        (e.fault == WrenchFault::None).then_some(())
    })
    .await;
    assert!(flowing.is_some(), "no valid estimate before the unplug");
    sim_fault(&s, &c, serde_json::json!({"sensor_unplugged": true})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut last_good: Option<u64> = None;
    let mut first_stale: Option<u64> = None;
    while let Ok(Some(sample)) = est.try_recv() {
        let e: WrenchEstimate = codec::decode(&sample.payload().to_bytes()).unwrap();
        match e.fault {
            // The first Stale *after* the last good estimate (a loaded host may flag a short
            // gap before the unplug too).
            WrenchFault::None => {
                last_good = Some(e.stamp.source_mono_ns);
                first_stale = None;
            }
            WrenchFault::Stale if first_stale.is_none() => {
                first_stale = Some(e.stamp.source_mono_ns)
            }
            _ => {}
        }
    }
    let (good, stale) = (last_good.unwrap(), first_stale.expect("a Stale estimate"));
    let ms = (stale - good) as f64 * 1e-6;
    eprintln!("flagged stale {ms:.2} ms after the last sample");
    // Threshold 9 ms, checked every 1 ms; a loaded CI machine may add scheduling delay.
    assert!(ms < 50.0, "stale after {ms} ms");
    drop(est);
    sim_fault(&s, &c, serde_json::json!({"sensor_unplugged": false})).await;
    let newest = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .unwrap();
    let back = wait_for(Duration::from_secs(10), || async {
        let sample = newest.recv_async().await.ok()?;
        let e: WrenchEstimate = codec::decode(&sample.payload().to_bytes()).ok()?;
        (e.fault == WrenchFault::None).then_some(())
    })
    .await;
    assert!(back.is_some(), "sensor did not come back\n{}", c.log_text());
    // The status detail refreshes periodically: wait for the count.
    let reconnects = wait_for(Duration::from_secs(5), || async {
        let st = statuses(&s, &c.cell).await.ok()?;
        let n = st["sensor"]["detail"]["reconnects"].as_u64()?;
        (n > reconnects_before).then_some(n)
    })
    .await
    .unwrap_or(reconnects_before);
    let st = statuses(&s, &c.cell).await.unwrap();
    assert!(
        reconnects > reconnects_before,
        "the driver did not count a reconnect ({reconnects_before} → {reconnects}): {}",
        st["sensor"]["detail"]
    );
}

/// The Raibert–Craig 2-DOF plant through its effort-command interface on the bus: pushing the
/// prismatic joint drives the hand into the reaction surface and the wrist force balances the
/// command (minus joint friction); when commands stop, the plant gets zero effort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dof_plant_effort_interface() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("plant", &["sim.plant.enabled=true"]);
    let s = up(&c).await;
    let states = s
        .declare_subscriber(topic::PLANT_STATE.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .unwrap();
    let key = topic::PLANT_EFFORT.key(&c.cell.id);
    let push_n = 30.0;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut last: Option<common::msg::PlantState> = None;
    for k in 0..3000u64 {
        tick.tick().await;
        let cmd = common::msg::PlantEffortCommand {
            stamp: common::msg::Stamp {
                seq: k + 1,
                source_mono_ns: common::clock::mono_ns(),
            },
            effort: [0.0, push_n],
        };
        s.put(&key, codec::encode(&cmd).expect("encodable"))
            .await
            .unwrap();
        if let Ok(Some(sample)) = states.try_recv() {
            last = codec::decode(&sample.payload().to_bytes()).ok();
        }
    }
    let st = last.expect("plant states");
    assert!(st.in_contact, "hand never reached the surface: {st:?}");
    let wrist = norm([st.wrist_force_n[0], st.wrist_force_n[1], 0.0]);
    // Static balance: wrist force = commanded force − joint friction (≤ 4 N static).
    assert!(
        (wrist - push_n).abs() <= 5.0,
        "wrist force {wrist} N vs commanded {push_n} N: {st:?}"
    );
    eprintln!("wrist force {wrist:.2} N for a {push_n} N command");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sample = states.recv_async().await.unwrap();
    let idle: common::msg::PlantState = codec::decode(&sample.payload().to_bytes()).unwrap();
    assert_eq!(
        idle.effort_applied,
        [0.0, 0.0],
        "silence must mean zero effort"
    );
}
