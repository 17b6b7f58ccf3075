//! EGM over real UDP on 127.0.0.1: a fake controller (hand-encoded `EgmRobot` datagrams)
//! against (1) robot-io's per-datagram core ([`robot_io::egm::cycle::EgmCore`], the code the
//! node runs for every datagram) behind a real `UdpSocket`, and (2) the real `cell-robot-io`
//! binary with `driver = "egm"`, with and without joint commands on the bus.
#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

use std::{
    net::{SocketAddr, UdpSocket},
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use common::msg::{JointCommand, MotionTag, Stamp};
use kinematics::JointLimits;
use robot_io::{
    egm::{
        cycle::{Datagram, EgmCore},
        proto::{decode_sensor, encode_sensor, EgmSensor, MessageType},
        session::{EgmSession, SessionParams},
    },
    supervisor::{irb120_max_accel, Supervisor, SupervisorParams},
};

const BOOT: u64 = 1;

// ---- the fake controller: hand-encoded EgmRobot ----------------------------------------------

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Length-delimited field (field numbers < 16: one-byte key).
fn ld(field: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![field << 3 | 2];
    varint(body.len() as u64, &mut out);
    out.extend_from_slice(body);
    out
}

/// `EgmRobot{header{seqno, tm, DATA}, feedBack{joints (deg, unpacked), time}, motorState,
/// mciState, rapidExecState RUNNING}` written from the wire format.
fn robot_bytes(seqno: u32, tm: u32, q_deg: [f64; 6], ready: bool) -> Vec<u8> {
    let mut header = vec![0x08];
    varint(u64::from(seqno), &mut header);
    header.push(0x10);
    varint(u64::from(tm), &mut header);
    header.extend_from_slice(&[0x18, 0x02]);
    let mut joints = Vec::new();
    for q in q_deg {
        joints.push(0x09);
        joints.extend_from_slice(&q.to_le_bytes());
    }
    let mut feedback = ld(1, &joints);
    feedback.extend(ld(4, &[0x08, 0x01, 0x10, 0x00]));
    let mut out = ld(1, &header);
    out.extend(ld(2, &feedback));
    out.extend(ld(4, &[0x08, if ready { 1 } else { 2 }])); // MOTORS_ON / OFF
    out.extend(ld(5, &[0x08, if ready { 3 } else { 2 }])); // MCI_RUNNING / STOPPED
    out.extend(ld(8, &[0x08, 0x02])); // RAPID_RUNNING
    out
}

fn controller() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s
}

fn recv_reply(s: &UdpSocket) -> Option<(EgmSensor, SocketAddr)> {
    let mut buf = [0u8; 4096];
    let (n, from) = s.recv_from(&mut buf).ok()?;
    Some((decode_sensor(&buf[..n]).unwrap(), from))
}

fn planned(r: &EgmSensor) -> Vec<f64> {
    r.planned
        .as_ref()
        .unwrap()
        .joints
        .as_ref()
        .unwrap()
        .joints
        .clone()
}

fn seqno(r: &EgmSensor) -> u32 {
    r.header.as_ref().unwrap().seqno.unwrap()
}

// ---- the driver under test: pure session + supervisor + a real socket ------------------------

/// What the harness driver answers with.
#[derive(Clone, Copy)]
enum Reference {
    /// Run the supervisor with this joint command (rad), fresh every cycle.
    Supervised(Option<[f64; 6]>),
    /// Bypass the supervisor: hand this reference (rad) straight to the session.
    Raw([f64; 6]),
}

struct Driver {
    addr: SocketAddr,
    reference: Arc<Mutex<Reference>>,
    malformed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<EgmSession>>,
}

impl Driver {
    fn start(reference: Reference) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let reference = Arc::new(Mutex::new(reference));
        let malformed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, m, st) = (reference.clone(), malformed.clone(), stop.clone());
        let handle = thread::spawn(move || {
            let epoch = Instant::now();
            let mut core = EgmCore::new(
                EgmSession::new(SessionParams::IRC5),
                Supervisor::new(SupervisorParams::irb120(BOOT)),
            );
            let mut buf = [0u8; 65536];
            let mut cmd_seq = 0u64;
            while !st.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let now = epoch.elapsed().as_secs_f64();
                cmd_seq += 1;
                let reply = match *r.lock().unwrap() {
                    Reference::Raw(q) => {
                        // Bypass the supervisor: exercise the session's own guard.
                        match robot_io::egm::proto::decode_robot(&buf[..n]) {
                            Ok(msg) => {
                                let _ = core.session.on_robot(&msg, now);
                            }
                            Err(_) => {
                                m.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        core.session.reply(&q, &[0.0; 6], now)
                    }
                    Reference::Supervised(c) => {
                        let cmd = c.map(|q| JointCommand {
                            stamp: Stamp {
                                seq: cmd_seq,
                                source_mono_ns: 0,
                            },
                            motion: MotionTag {
                                robot_boot: BOOT,
                                motion_id: 1,
                            },
                            q_rad: q,
                            ..Default::default()
                        });
                        let h = core.on_datagram(&buf[..n], now, cmd.as_ref().map(|c| (c, now)));
                        if matches!(h.datagram, Datagram::Malformed(_)) {
                            m.fetch_add(1, Ordering::Relaxed);
                        }
                        h.reply
                    }
                };
                if let Some(reply) = reply {
                    sock.send_to(&encode_sensor(&reply.to_proto()), from)
                        .unwrap();
                    core.session.on_reply_sent(epoch.elapsed().as_secs_f64());
                }
            }
            core.session
        });
        Self {
            addr,
            reference,
            malformed,
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> EgmSession {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

const Q0_DEG: [f64; 6] = [10.0, -20.0, 30.0, 0.0, 45.0, 90.0];

#[test]
fn replies_go_to_the_sender_with_seqno_and_degrees() {
    let d = Driver::start(Reference::Supervised(None));
    let a = controller();
    let b = controller();
    // No command: every reply holds the measured position, in degrees, seqno +1 each.
    for k in 0..20u32 {
        a.send_to(&robot_bytes(k, 4 * k, Q0_DEG, true), d.addr)
            .unwrap();
        let (r, from) = recv_reply(&a).expect("reply to controller A");
        assert_eq!(from, d.addr);
        assert_eq!(seqno(&r), k);
        let h = r.header.as_ref().unwrap();
        assert_eq!(h.mtype(), MessageType::Correction);
        for (p, q) in planned(&r).iter().zip(Q0_DEG.iter()) {
            assert!((p - q).abs() < 1e-9, "{:?}", planned(&r));
        }
        assert_eq!(
            r.speed_ref.unwrap().joints.unwrap().joints,
            vec![0.0; 6],
            "holding: zero speed"
        );
    }
    // A command 1° away on A1: the reference moves towards it (accelerating from rest) and
    // stays in degrees.
    let mut target = Q0_DEG.map(f64::to_radians);
    target[0] += 1f64.to_radians();
    *d.reference.lock().unwrap() = Reference::Supervised(Some(target));
    let mut prev = Q0_DEG[0];
    for k in 20..40u32 {
        a.send_to(&robot_bytes(k, 4 * k, Q0_DEG, true), d.addr)
            .unwrap();
        let (r, _) = recv_reply(&a).unwrap();
        assert_eq!(seqno(&r), k);
        let p = planned(&r);
        assert!(
            p[0] >= prev - 1e-12 && p[0] <= Q0_DEG[0] + 1.0 + 1e-9,
            "{p:?}"
        );
        prev = p[0];
        for j in 1..6 {
            assert!((p[j] - Q0_DEG[j]).abs() < 1e-9);
        }
    }
    assert!(prev > Q0_DEG[0] + 0.05, "moved towards the command: {prev}");
    // Another sender (another port): the reply goes there, not to A.
    b.send_to(&robot_bytes(40, 160, Q0_DEG, true), d.addr)
        .unwrap();
    let (r, _) = recv_reply(&b).expect("reply to controller B");
    assert_eq!(seqno(&r), 40);
    a.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(recv_reply(&a).is_none(), "nothing for A");
    let s = d.finish();
    assert_eq!(s.stats().replies, 41);
    assert_eq!(s.stats().lost, 0);
}

#[test]
fn non_finite_references_are_never_sent() {
    let good = [0.1; 6];
    let d = Driver::start(Reference::Raw(good));
    let c = controller();
    c.send_to(&robot_bytes(10, 0, Q0_DEG, true), d.addr)
        .unwrap();
    let (first, _) = recv_reply(&c).unwrap();
    let mut bad = good;
    for (k, v) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
        .into_iter()
        .enumerate()
    {
        bad[k] = v;
        *d.reference.lock().unwrap() = Reference::Raw(bad);
        let k = 11 + k as u32;
        c.send_to(&robot_bytes(k, 4 * k, Q0_DEG, true), d.addr)
            .unwrap();
        let (r, _) = recv_reply(&c).unwrap();
        assert_eq!(
            planned(&r),
            planned(&first),
            "the last sent reference instead (never the measured position)"
        );
        for v in r.speed_ref.unwrap().joints.unwrap().joints {
            assert!(v.is_finite());
        }
    }
    // Through the supervisor: a NaN command holds.
    *d.reference.lock().unwrap() = Reference::Supervised(Some([f64::NAN; 6]));
    c.send_to(&robot_bytes(0, 0, Q0_DEG, true), d.addr).unwrap();
    let (r, _) = recv_reply(&c).unwrap();
    assert_eq!(planned(&r), Q0_DEG.to_vec());
    let s = d.finish();
    assert_eq!(s.stats().replaced_non_finite, 3);
}

#[test]
fn malformed_datagrams_are_dropped_and_counted() {
    let d = Driver::start(Reference::Supervised(None));
    let c = controller();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let valid = robot_bytes(0, 0, Q0_DEG, true);
    for garbage in [
        vec![0xFF; 7],
        valid[..valid.len() - 3].to_vec(),
        vec![0x0A, 0x7F, 0x08],
    ] {
        c.send_to(&garbage, d.addr).unwrap();
        assert!(recv_reply(&c).is_none());
    }
    c.send_to(&valid, d.addr).unwrap();
    assert_eq!(seqno(&recv_reply(&c).unwrap().0), 0);
    assert_eq!(d.malformed.load(Ordering::Relaxed), 3);
    d.finish();
}

/// A closed loop: the fake controller moves to each planned position (an ideal servo), drops
/// 10 % of its datagrams (seqno gaps) and jitters its period by up to 2 ms; the supervised
/// reference chases a far command. The robot never exceeds the speed limits, replies stay
/// finite, and the driver counts exactly the datagrams that were skipped.
#[test]
fn closed_loop_with_loss_and_jitter_stays_within_limits() {
    let mut target = Q0_DEG.map(f64::to_radians);
    target[0] += 0.5;
    target[3] -= 0.5;
    let d = Driver::start(Reference::Supervised(Some(target)));
    let c = controller();
    let l = JointLimits::irb120();
    let mut q = Q0_DEG;
    let mut skipped = 0u64;
    let mut lcg: u64 = 12345;
    let mut rnd = || {
        lcg = lcg
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (lcg >> 33) as f64 / (1u64 << 31) as f64
    };
    let mut tm = 0u32;
    let mut last_sent_tm = 0u32;
    for seq in 0..300u32 {
        tm += 4;
        if seq > 0 && rnd() < 0.1 {
            skipped += 1;
            continue;
        }
        let jitter = Duration::from_micros((rnd() * 2000.0) as u64);
        thread::sleep(Duration::from_millis(2) + jitter);
        c.send_to(&robot_bytes(seq, tm, q, true), d.addr).unwrap();
        let (r, _) = recv_reply(&c).unwrap();
        let p = planned(&r);
        let dt = f64::from(tm - last_sent_tm) * 1e-3;
        for j in 0..6 {
            assert!(p[j].is_finite());
            let step = (p[j] - q[j]).to_radians().abs();
            if seq > 0 {
                assert!(
                    step <= l.max_speed[j] * dt + 1e-9,
                    "joint {j} step {step} over {dt}"
                );
            }
            q[j] = p[j];
        }
        last_sent_tm = tm;
    }
    assert!(
        (q[0].to_radians() - target[0]).abs() < 1e-6,
        "arrived: {q:?}"
    );
    let s = d.finish();
    assert_eq!(s.stats().lost, skipped);
    assert!(s.stats().turnaround.max < 0.1);
    eprintln!("closed loop over UDP: {}", s.stats().json());
}

// ---- the real binary ---------------------------------------------------------------------------

fn free_udp_port() -> u16 {
    common::ports::free_loopback_port().unwrap()
}

fn free_tcp_port() -> u16 {
    common::ports::free_loopback_port().unwrap()
}

/// A child process killed when the test ends, also when it panics.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// An in-process zenoh router at `router` (the cell's router the binary connects to).
async fn open_router(router: &str) -> zenoh::Session {
    let mut cfg = zenoh::Config::default();
    cfg.insert_json5("mode", "\"router\"").unwrap();
    cfg.insert_json5("listen/endpoints", &format!("[\"{router}\"]"))
        .unwrap();
    cfg.insert_json5("scouting/multicast/enabled", "false")
        .unwrap();
    zenoh::open(cfg).await.unwrap()
}

/// Starts `cell-robot-io` with `driver = "egm"` on `127.0.0.1:port`, its bus pointed at
/// `router`, a private cell id and latch file, answering only the controller at `pin` (the
/// built-in config pins the simulator's address).
fn spawn_robot_io_pinned(port: u16, router: &str, cell_id: &str, pin: Option<&str>) -> Reaped {
    let latch = std::env::temp_dir().join(format!("{cell_id}-latch.json"));
    let mut args = vec![
        "--set".to_string(),
        "robot_io.driver=\"egm\"".to_string(),
        "--set".to_string(),
        format!("robot_io.egm.bind=\"127.0.0.1:{port}\""),
        "--set".to_string(),
        format!("cell.router=\"{router}\""),
        "--set".to_string(),
        format!("cell.id=\"{cell_id}\""),
        "--set".to_string(),
        format!("robot_io.latch_file=\"{}\"", latch.display()),
    ];
    if let Some(p) = pin {
        args.push("--set".into());
        args.push(format!("robot_io.egm.controller=\"{p}\""));
    }
    // With speedRef (off by default): a reply at rest says so by a zero speedRef.
    args.push("--set".into());
    args.push("robot_io.egm.send_speed_ref=true".into());
    Command::new(env!("CARGO_BIN_EXE_cell-robot-io"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .unwrap()
}

/// `cell-robot-io` with `driver = "egm"` (no router reachable: the bus is not needed to
/// answer the robot): replies to the sender, seqno +1, holds the measured position in degrees
/// without commands, survives garbage, and answers again after a silence.
#[test]
fn binary_answers_every_egm_robot() {
    let port = free_udp_port();
    let router = format!("tcp/127.0.0.1:{}", free_tcp_port());
    let c = controller();
    let pin = c.local_addr().unwrap().to_string();
    let mut child = spawn_robot_io_pinned(
        port,
        &router,
        &format!("egmtest{}", std::process::id()),
        Some(&pin),
    );
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // Wait for the driver to come up.
    let t0 = Instant::now();
    let first = loop {
        c.send_to(&robot_bytes(0, 0, Q0_DEG, true), target).unwrap();
        if let Some(r) = recv_reply(&c) {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no reply from cell-robot-io"
        );
    };
    let mut last = seqno(&first.0);
    assert_eq!(first.1, target);
    let mut seq = 1u32;
    for _ in 0..50 {
        c.send_to(&robot_bytes(seq, 4 * seq, Q0_DEG, true), target)
            .unwrap();
        let (r, from) = recv_reply(&c).unwrap();
        assert_eq!(from, target);
        assert_eq!(seqno(&r), last + 1);
        last = seqno(&r);
        for (p, q) in planned(&r).iter().zip(Q0_DEG.iter()) {
            assert!((p - q).abs() < 1e-9);
        }
        seq += 1;
        thread::sleep(Duration::from_millis(4));
    }
    // Garbage: no reply, no crash.
    c.send_to(&[0xFF, 0xFF, 0xFF], target).unwrap();
    assert!(recv_reply(&c).is_none());
    // Silence (> 50 ms), then the robot comes back somewhere else (motors were off, it was
    // moved): the reply holds the new measured position.
    let moved = [0.0, 0.0, 0.0, 0.0, 30.0, 0.0];
    c.send_to(&robot_bytes(seq, 4 * seq, moved, false), target)
        .unwrap();
    assert_eq!(planned(&recv_reply(&c).unwrap().0), moved.to_vec());
    seq += 1;
    c.send_to(&robot_bytes(seq, 4 * seq, moved, true), target)
        .unwrap();
    assert_eq!(planned(&recv_reply(&c).unwrap().0), moved.to_vec());
    assert!(child.try_wait().unwrap().is_none(), "still running");
    // SIGTERM: clean exit.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A pinned `cell-robot-io` drops a stranger's datagrams before anything else: two strangers
/// (another port of the controller's address, and another loopback address) send a session
/// start with A1 at 45°: no reply, no restart, no joint state at 45°, both counted, the last one
/// named; the pinned controller is still answered.
#[test]
fn binary_drops_a_strangers_datagrams() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = free_udp_port();
    let router = format!("tcp/127.0.0.1:{}", free_tcp_port());
    let cell_id = format!("egmpin{}", std::process::id());
    let zs = rt.block_on(open_router(&router));
    let c = controller();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let pin = c.local_addr().unwrap().to_string();
    let mut child = spawn_robot_io_pinned(port, &router, &cell_id, Some(&pin));
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let js =
        zenoh::Wait::wait(zs.declare_subscriber(common::topic::JOINT_STATE.key(&cell_id))).unwrap();
    let status = || -> Option<serde_json::Value> {
        let replies =
            zenoh::Wait::wait(zs.get(common::topic::status_key(&cell_id, "robot-io"))).ok()?;
        let r = replies.recv_timeout(Duration::from_secs(2)).ok()??;
        let bytes = r.result().ok()?.payload().to_bytes();
        serde_json::from_slice(&bytes).ok()
    };
    // The pinned controller's session: answered.
    let t0 = Instant::now();
    let mut seq = 0u32;
    loop {
        c.send_to(&robot_bytes(seq, 4 * seq, Q0_DEG, true), target)
            .unwrap();
        seq += 1;
        if recv_reply(&c).is_some() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no reply to the pinned controller"
        );
    }
    for _ in 0..10 {
        c.send_to(&robot_bytes(seq, 4 * seq, Q0_DEG, true), target)
            .unwrap();
        seq += 1;
        assert!(
            recv_reply(&c).is_some(),
            "the pinned controller is answered"
        );
    }
    let before = loop {
        let st = status().expect("robot-io's status");
        if st["detail"]["egm"]["restarts"].is_u64() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no EGM status: {st}"
        );
        thread::sleep(Duration::from_millis(100));
    };
    let restarts = before["detail"]["egm"]["restarts"].as_u64().unwrap();
    assert_eq!(before["detail"]["egm"]["pinned"], serde_json::json!(pin));
    // Two strangers start a session (seqno 0) with A1 at 45°.
    let mut stranger_q = Q0_DEG;
    stranger_q[0] = 45.0;
    let other_port = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_addr = UdpSocket::bind("127.0.0.2:0").unwrap();
    for s in [&other_port, &other_addr] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        s.send_to(&robot_bytes(0, 0, stranger_q, true), target)
            .unwrap();
        assert!(recv_reply(s).is_none(), "a stranger was answered");
    }
    // The controller goes on: still answered, at its own position.
    for _ in 0..10 {
        c.send_to(&robot_bytes(seq, 4 * seq, Q0_DEG, true), target)
            .unwrap();
        seq += 1;
        let (r, _) = recv_reply(&c).expect("the pinned controller is still answered");
        assert!((planned(&r)[0] - Q0_DEG[0]).abs() < 1e-9);
    }
    let after = loop {
        let st = status().expect("robot-io's status");
        if st["detail"]["egm"]["strangers"].as_u64() == Some(2) {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "strangers not counted: {}",
            st["detail"]["egm"]
        );
        thread::sleep(Duration::from_millis(100));
    };
    let egm = &after["detail"]["egm"];
    assert_eq!(
        egm["last_stranger"]["from"],
        serde_json::json!(other_addr.local_addr().unwrap().to_string())
    );
    assert_eq!(
        egm["restarts"].as_u64(),
        Some(restarts),
        "a stranger restarted the session"
    );
    assert_eq!(after["detail"]["peer"], serde_json::json!(pin));
    while let Ok(Some(s)) = js.try_recv() {
        let j = common::codec::decode::<common::msg::JointState>(&s.payload().to_bytes()).unwrap();
        assert!(
            (j.q_rad[0].to_degrees() - Q0_DEG[0]).abs() < 1e-6,
            "a stranger's joints were published: {:?}",
            j.q_rad
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// The real `cell-robot-io` binary driven over the bus: an in-process zenoh router at the
/// cell's router address, joint commands tagged with robot-io's boot id (read from its safety
/// state), and a lagging fake controller following the replies. The references robot-io sends
/// move towards the command within the speed and acceleration limits (on the controller's
/// clock, which is exact here); a command with another boot id moves nothing; when the
/// commands stop, the reference holds within the command timeout and a resumed stream of the
/// same motion is refused.
#[test]
fn binary_executes_commands_from_the_bus_within_limits() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = free_udp_port();
    let router_port = free_tcp_port();
    let router = format!("tcp/127.0.0.1:{router_port}");
    let cell_id = format!("egmbus{}", std::process::id());
    let zs = rt.block_on(open_router(&router));
    // The fake controller: every 4 ms an EgmRobot; the robot follows the replies with lag.
    let c = controller();
    let pin = c.local_addr().unwrap().to_string();
    let mut child = spawn_robot_io_pinned(port, &router, &cell_id, Some(&pin));
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let safety_key = common::topic::SAFETY_STATE.key(&cell_id);
    let cmd_key = common::topic::JOINT_COMMAND.key(&cell_id);
    let safety = zenoh::Wait::wait(zs.declare_subscriber(&safety_key)).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut q = Q0_DEG;
    let mut seq = 0u32;
    // (reply seqno = controller seqno, planned joints (deg), holding: speedRef all zero)
    type Replies = Vec<(u32, Vec<f64>, bool)>;
    let mut replies: Replies = Vec::new();
    let cycle = |q: &mut [f64; 6], seq: &mut u32, replies: &mut Replies| {
        c.send_to(&robot_bytes(*seq, 4 * *seq, *q, true), target)
            .unwrap();
        if let Some((r, _)) = recv_reply(&c) {
            let p = planned(&r);
            for j in 0..6 {
                q[j] += 0.5 * (p[j] - q[j]);
            }
            let holding = r
                .speed_ref
                .as_ref()
                .and_then(|s| s.joints.as_ref())
                .is_some_and(|j| j.joints.iter().all(|v| *v == 0.0));
            // Paired by the reply's own seqno (+1 per reply from 0 at the session start, one
            // reply per datagram here): a reply that arrives after the receive timeout on a
            // loaded host is not attributed to the next datagram.
            replies.push((seqno(&r), p, holding));
        }
        *seq += 1;
        thread::sleep(Duration::from_millis(4));
    };
    // Wait for robot-io: replies, and its safety state with the boot id.
    let t0 = Instant::now();
    let boot = loop {
        cycle(&mut q, &mut seq, &mut replies);
        if let Ok(Some(s)) = safety.try_recv() {
            if let Ok(st) =
                common::codec::decode::<common::msg::SafetyState>(&s.payload().to_bytes())
            {
                if !replies.is_empty() {
                    break st.robot_boot;
                }
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "robot-io silent");
    };
    let put = |k: u64, boot: u64, q_rad: [f64; 6]| {
        let cmd = JointCommand {
            stamp: Stamp {
                seq: k,
                source_mono_ns: 0,
            },
            motion: MotionTag {
                robot_boot: boot,
                motion_id: 42,
            },
            q_rad,
            ..Default::default()
        };
        zenoh::Wait::wait(zs.put(&cmd_key, common::codec::encode(&cmd).unwrap())).unwrap();
    };
    let mut goal = Q0_DEG.map(f64::to_radians);
    goal[0] += 20f64.to_radians();
    // Another boot id: refused, nothing moves.
    let n0 = replies.len();
    for k in 0..50 {
        put(k, boot ^ 1, goal);
        cycle(&mut q, &mut seq, &mut replies);
    }
    for (_, p, _) in &replies[n0..] {
        assert!(
            (p[0] - Q0_DEG[0]).abs() < 1e-9,
            "moved for another boot: {p:?}"
        );
    }
    // The right boot id: moves within the limits.
    let n1 = replies.len();
    for k in 50..400 {
        put(k, boot, goal);
        cycle(&mut q, &mut seq, &mut replies);
    }
    let l = JointLimits::irb120();
    let a = irb120_max_accel();
    let mut v_prev = 0.0;
    let mut moved = 0.0f64;
    let mut holds = 0;
    // From the last refused reply (at rest at Q0): on a fast host the first reply of this
    // phase is already the first moving step, so the velocity before it must be known (0).
    for w in replies[n1 - 1..].windows(2) {
        let dt = f64::from(w[1].0 - w[0].0) * 0.004;
        let v = (w[1].1[0] - w[0].1[0]).to_radians() / dt;
        if w[1].2 && v_prev == 0.0 {
            // A hold at rest (the reference at the goal, or a command delayed past the
            // timeout on this loaded host while the reference stood still: the hold takes
            // the measured joints, which may sit a residue of the lag away). A hold that
            // follows a moving reference is not exempt: a stale stream brakes it within
            // the limits (it stepped back to the measured joints before).
            holds += 1;
            continue;
        }
        holds += usize::from(w[1].2);
        assert!(v.abs() <= l.max_speed[0] * (1.0 + 1e-6), "speed {v}");
        assert!(
            (v - v_prev).abs() <= a[0] * dt * (1.0 + 1e-6) + 1e-6,
            "acceleration {v_prev} → {v} (replies (seqno, A1 deg, holding): {:?})",
            replies
                .iter()
                .map(|(n, p, h)| (*n, p[0], *h))
                .skip_while(|(n, _, _)| *n + 6 < w[1].0)
                .take(9)
                .collect::<Vec<_>>()
        );
        v_prev = v;
        moved = moved.max(w[1].1[0] - Q0_DEG[0]);
    }
    assert!(moved > 5.0, "A1 moved only {moved}°");
    eprintln!("{holds} of 350 replies at rest (holds, or the reference at the goal)");
    // The stream stops: within the command timeout (+ a cycle of delivery) the reference
    // holds still.
    let n2 = replies.len();
    for _ in 0..40 {
        cycle(&mut q, &mut seq, &mut replies);
    }
    let tail = &replies[n2 + 5..];
    for w in tail.windows(2) {
        assert_eq!(w[0].1, w[1].1, "still moving after the stream stopped");
    }
    // The same motion resumes: refused (the stop ended it), nothing moves.
    let held = tail.last().unwrap().1.clone();
    let n3 = replies.len();
    for k in 400..450 {
        put(k, boot, goal);
        cycle(&mut q, &mut seq, &mut replies);
    }
    for (_, p, _) in &replies[n3..] {
        assert_eq!(*p, held, "an ended motion moved again");
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success());
    rt.block_on(async { zs.close().await.unwrap() });
}
