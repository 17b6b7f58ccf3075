//! Record, replay and live view (issue 45) through the real processes.
//!
//! - `cell record` on a running cell while the operator commands it: the file opens with
//!   PyPI's `mcap` (tests/python/check_mcap.py: a schema on every channel, JSON messages that
//!   validate against them, truncated at random bytes it still yields every complete chunk's
//!   messages), and every sample on the bus declared its encoding (the raw channels' metadata);
//! - `cell replay` onto the live cell publishes no command (skipped, and `--commands` refused
//!   while robot-io reports an active robot); into a bare router it reproduces each topic's
//!   message count and order (a second recording of the replay, compared stamp by stamp);
//! - `cell viz`: our own Foxglove-protocol client (tokio-tungstenite, not the foxglove crate)
//!   subscribes to the wrench, the joint states, `/tf` and `/scene/arm`, decodes them; the
//!   link frames agree with the kinematics library's at the joints the scene carries, tool0
//!   with `cell kin fk`'s printed pose; a service call reaches control like the CLI's;
//! - `cell viz --replay`: the recording with Foxglove's playback control (pause, seek, play);
//! - `cell viz` on the secured profile: its services act under the viewer's identity (the
//!   operator's reach the cell; the sensor node's are refused with the reason, nothing sent).
#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::topic;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tests::{up_all, TestCell};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

fn python_has_mcap() -> bool {
    Command::new("python3")
        .args(["-c", "import mcap, jsonschema"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cell-obs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Per topic, the stamp sequence numbers of a recording's raw channels, in log-time order.
fn sequences(path: &Path) -> BTreeMap<String, Vec<u64>> {
    let bytes = std::fs::read(path).unwrap();
    let plan = cell::replay::read(&bytes, &[]).unwrap();
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for i in &plan.items {
        let v = topic::to_json(i.topic, &i.payload).unwrap();
        out.entry(i.suffix.clone())
            .or_default()
            .push(v["stamp"]["seq"].as_u64().unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_opens_anywhere_replays_exactly_and_never_commands_a_live_robot() {
    let _lock = tests::cell_lock();
    let python = python_has_mcap();
    if !python {
        tests::require_or_skip(
            "CELL_REQUIRE_PYTHON_MCAP",
            "python3 has no `mcap`/`jsonschema` module (pip install mcap jsonschema)",
        );
    }
    let dir = temp("rec");
    let file = dir.join("cell.mcap");
    let c = TestCell::start("record", &[]);
    let s = up_all(&c).await;
    // Record 6 s while the operator commands: hold, an e-stop and its reset.
    let mut rec = c.spawn_cli(&["record", file.to_str().unwrap(), "--seconds", "6"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for args in [
        &["mode", "hold"][..],
        &["estop"],
        &["reset"],
        &["mode", "idle"],
    ] {
        let (ok, _, e) = c.cli(args);
        assert!(ok, "cell {}: {e}", args.join(" "));
    }
    let st = rec.wait().unwrap();
    assert!(st.success(), "cell record failed\n{}", c.log_text());
    let seqs = sequences(&file);
    for t in [
        "robot/joint_state",
        "force/wrench",
        "kin/tool_pose",
        "robot/safety",
        "control/mode",
        "robot/estop",
        "robot/reset",
    ] {
        assert!(
            seqs.get(t).is_some_and(|v| !v.is_empty()),
            "{t} not recorded: {:?}",
            seqs.keys()
        );
    }
    // Every raw channel names the encoding its publisher declared: the cell's postcard type.
    {
        let bytes = std::fs::read(&file).unwrap();
        let summary = mcap::Summary::read(&bytes)
            .unwrap()
            .expect("a finished file has a summary");
        for ch in summary.channels.values() {
            if ch.message_encoding == "postcard" {
                let enc = ch
                    .metadata
                    .get("zenoh_encoding")
                    .cloned()
                    .unwrap_or_default();
                assert!(
                    enc.starts_with(topic::POSTCARD_ENCODING) && enc.contains("wire="),
                    "{} was published with encoding {enc:?}",
                    ch.topic
                );
            }
        }
    }
    if python {
        let out = Command::new("python3")
            .arg(tests::repo_root().join("tests/python/check_mcap.py"))
            .arg(&file)
            .args(["--cuts", "12", "--seed", "7"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "check_mcap.py: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        assert!(v["validated"].as_u64().unwrap() > 100, "{v}");
        assert!(
            v["chunks"].as_u64().unwrap() >= 4,
            "6 s make several chunks: {v}"
        );
        assert!(
            v["max_chunk_span_s"].as_f64().unwrap() <= 1.1,
            "a chunk spans ≤ 1 s: {v}"
        );
    }

    // Onto the live cell: commands are skipped (none reaches the bus), --commands refused.
    let cmd_keys = ["control/mode", "robot/estop", "robot/reset"];
    let mut subs = Vec::new();
    for k in cmd_keys {
        subs.push(
            s.declare_subscriber(format!("cell/{}/{k}", c.cell.id))
                .await
                .unwrap(),
        );
    }
    let (ok, out, err) = c.cli(&["replay", file.to_str().unwrap(), "--speed", "4"]);
    assert!(ok, "replay onto the live cell: {err}");
    // The claim is about the bus: nothing arrived on a command key.
    for (k, sub) in cmd_keys.iter().zip(&subs) {
        assert!(sub.try_recv().unwrap().is_none(), "replay published on {k}");
    }
    let sum: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        sum["published"]["force/wrench"].as_u64().unwrap_or(0) > 0,
        "{sum}"
    );
    for k in cmd_keys {
        assert!(sum["published"].get(k).is_none(), "{sum}");
        assert!(
            err.contains(&format!("skipping {k}")),
            "{k} not reported skipped: {err}"
        );
    }
    let (ok, _, err) = c.cli(&["replay", file.to_str().unwrap(), "--commands"]);
    assert!(
        !ok && err.contains("refused") && err.contains("active robot"),
        "{err}"
    );
    for (k, sub) in cmd_keys.iter().zip(&subs) {
        assert!(
            sub.try_recv().unwrap().is_none(),
            "a refused replay published on {k}"
        );
    }
    drop(subs);
    let _ = s.close().await;

    // Into a bare router (no robot-io): every topic, each in its recorded count and order.
    let port = tests::free_port();
    let bare = format!("tcp/127.0.0.1:{port}");
    let mut router = c
        .command()
        .args(["--set", &format!("cell.router=\"{bare}\""), "router"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let again = dir.join("replayed.mcap");
    let mut rec2 = c
        .command()
        .args([
            "--connect",
            &bare,
            "record",
            again.to_str().unwrap(),
            "--seconds",
            "7",
        ])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let out = c
        .command()
        .args([
            "--connect",
            &bare,
            "replay",
            file.to_str().unwrap(),
            "--speed",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rec2.wait().unwrap().success());
    let _ = router.kill();
    let _ = router.wait();
    let replayed = sequences(&again);
    assert_eq!(
        seqs.keys().collect::<Vec<_>>(),
        replayed.keys().collect::<Vec<_>>(),
        "topics"
    );
    for (t, v) in &seqs {
        assert_eq!(v.len(), replayed[t].len(), "{t}: count");
        assert_eq!(v, &replayed[t], "{t}: order");
    }

    // The recording in Foxglove (`cell viz --replay`) with its playback control: the data's
    // range announced, pause stops the messages, a seek back to the start plays them again.
    let listen = format!("127.0.0.1:{}", tests::free_port());
    let mut viz = c
        .command()
        .args([
            "viz",
            "--replay",
            file.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .args(["--seconds", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut fox = Fox::connect(&format!("ws://{listen}")).await;
    let js_topic = format!("/cell/{}/robot/joint_state", c.cell.id);
    let mut info = None;
    while !(fox.channels.contains_key(&js_topic) && fox.channels.contains_key("/tf")) {
        match fox.next(Duration::from_secs(10)).await {
            Some(Ok(v)) if v["op"] == "serverInfo" => info = Some(v),
            Some(_) => {}
            None => panic!("no advertisement: {:?}", fox.channels.keys()),
        }
    }
    let info = info.expect("serverInfo");
    let caps: Vec<&str> = info["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        caps.contains(&"playbackControl") && caps.contains(&"time"),
        "{info}"
    );
    let js_id = fox.channels[&js_topic].0;
    let tf_id = fox.channels["/tf"].0;
    fox.send(json!({"op": "subscribe", "subscriptions": [
        {"id": 0, "channelId": js_id}, {"id": 1, "channelId": tf_id}]}))
        .await;
    // Messages arrive, at recorded times.
    let mut first = None;
    let mut last = 0u64;
    let mut tf_seen = false;
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        if let Some(Err((sub, t, _))) = fox.next(Duration::from_millis(500)).await {
            match sub {
                0 => {
                    first.get_or_insert(t);
                    last = last.max(t);
                }
                1 => tf_seen = true,
                _ => {}
            }
        }
    }
    let first = first.expect("replayed joint states");
    assert!(
        tf_seen,
        "the 3-D frames are derived from the replayed joints"
    );
    let control = |cmd: u8, seek: Option<u64>, id: &str| {
        let mut b = vec![3u8, cmd];
        b.extend(1.0f32.to_le_bytes());
        b.push(u8::from(seek.is_some()));
        b.extend(seek.unwrap_or(0).to_le_bytes());
        b.extend((id.len() as u32).to_le_bytes());
        b.extend(id.as_bytes());
        Message::Binary(b.into())
    };
    // Pause: the state says so, and after a grace period no message data flows.
    fox.ws.send(control(1, None, "pause-1")).await.unwrap();
    let mut paused = false;
    let grace = tokio::time::Instant::now() + Duration::from_millis(500);
    while tokio::time::Instant::now() < grace {
        if let Some(Err((u32::MAX, 5, p))) = fox.next(Duration::from_millis(100)).await {
            paused |= p[0] == 1 && String::from_utf8_lossy(&p).contains("pause-1");
        }
    }
    assert!(paused, "no Paused playback state for the request");
    let quiet = tokio::time::Instant::now() + Duration::from_secs(1);
    while tokio::time::Instant::now() < quiet {
        if let Some(Err((sub, _, _))) = fox.next(Duration::from_millis(100)).await {
            assert_eq!(sub, u32::MAX, "message data while paused");
        }
    }
    // Seek to the start and play: the recorded times start over.
    fox.ws
        .send(control(0, Some(first), "seek-1"))
        .await
        .unwrap();
    let mut again = None;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while again.is_none() && tokio::time::Instant::now() < until {
        if let Some(Err((0, t, _))) = fox.next(Duration::from_millis(500)).await {
            again = Some(t);
        }
    }
    let again = again.expect("messages after the seek");
    assert!(
        again < last,
        "after a seek to the start: {again} vs {last} before the pause"
    );
    let _ = viz.kill();
    let _ = viz.wait();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A minimal Foxglove WebSocket (`foxglove.sdk.v1`) client: text ops as JSON, binary message
/// data as (opcode 1, subscription id u32, log time u64, payload).
struct Fox {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    channels: BTreeMap<String, (u64, Value)>,
    services: BTreeMap<String, u64>,
}

impl Fox {
    async fn connect(url: &str) -> Fox {
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", "foxglove.sdk.v1".parse().unwrap());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let ws = loop {
            match tokio_tungstenite::connect_async(req.clone()).await {
                Ok((ws, resp)) => {
                    assert_eq!(
                        resp.headers()
                            .get("Sec-WebSocket-Protocol")
                            .map(|v| v.to_str().unwrap()),
                        Some("foxglove.sdk.v1")
                    );
                    break ws;
                }
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot connect to {url}: {e}"),
            }
        };
        Fox {
            ws,
            channels: BTreeMap::new(),
            services: BTreeMap::new(),
        }
    }

    /// Reads until `done` or the timeout; JSON ops update channels/services and are returned.
    async fn next(&mut self, within: Duration) -> Option<Result<Value, (u32, u64, Vec<u8>)>> {
        let m = tokio::time::timeout(within, self.ws.next())
            .await
            .ok()??
            .ok()?;
        match m {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["op"].as_str() {
                    Some("advertise") => {
                        for c in v["channels"].as_array().unwrap() {
                            self.channels.insert(
                                c["topic"].as_str().unwrap().to_string(),
                                (c["id"].as_u64().unwrap(), c.clone()),
                            );
                        }
                    }
                    Some("advertiseServices") => {
                        for sv in v["services"].as_array().unwrap() {
                            self.services.insert(
                                sv["name"].as_str().unwrap().to_string(),
                                sv["id"].as_u64().unwrap(),
                            );
                        }
                    }
                    _ => {}
                }
                Some(Ok(v))
            }
            Message::Binary(b) => {
                let b = b.to_vec();
                let op = b[0];
                if op == 1 {
                    let sub = u32::from_le_bytes(b[1..5].try_into().unwrap());
                    let t = u64::from_le_bytes(b[5..13].try_into().unwrap());
                    Some(Err((sub, t, b[13..].to_vec())))
                } else {
                    Some(Err((u32::MAX, op as u64, b[1..].to_vec())))
                }
            }
            _ => Some(Ok(Value::Null)),
        }
    }

    async fn send(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    /// Reads until the services `names` are advertised.
    async fn services_advertised(&mut self, names: &[&str]) {
        while !names.iter().all(|n| self.services.contains_key(*n)) {
            if self.next(Duration::from_secs(20)).await.is_none() {
                panic!("services {names:?} not advertised: {:?}", self.services);
            }
        }
    }

    /// Calls service `name` with the JSON `body` (Foxglove's binary service call, op 2):
    /// Ok(the response's JSON) or Err(the serviceCallFailure's message).
    async fn call(&mut self, name: &str, body: &Value, call_id: u32) -> Result<Value, String> {
        let id = self.services[name] as u32;
        let mut b = vec![2u8];
        b.extend(id.to_le_bytes());
        b.extend(call_id.to_le_bytes());
        b.extend(4u32.to_le_bytes());
        b.extend(b"json");
        b.extend(body.to_string().as_bytes());
        self.ws.send(Message::Binary(b.into())).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                // serviceCallResponse: service id, call id, encoding length, encoding, body.
                Some(Err((u32::MAX, 3, p)))
                    if u32::from_le_bytes(p[4..8].try_into().unwrap()) == call_id =>
                {
                    let enc_len = u32::from_le_bytes(p[8..12].try_into().unwrap()) as usize;
                    return Ok(serde_json::from_slice(&p[12 + enc_len..]).unwrap());
                }
                Some(Ok(v)) if v["op"] == "serviceCallFailure" && v["callId"] == call_id => {
                    return Err(v["message"].as_str().unwrap_or_default().to_string());
                }
                Some(_) => {}
                None => panic!("no answer to the {name} call within 20 s"),
            }
        }
    }
}

/// The live view's operator services on the secured profile (sim-secure.toml, certificates
/// from `cell certs init`): each `cell viz` acts as its own identity, under that identity's
/// row of the roles table, as the CLI does. As `operator` a mode request reaches the bus, a
/// tare is answered and an e-stop is acknowledged by robot-io; as `sensor` (the sensor node's
/// certificate: it may engage the e-stop, nothing else an operator does) the mode request is
/// refused before anything is sent, with the reason — the access control would have dropped
/// it silently and the view would have said "requested" — and the tare gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foxglove_services_act_under_the_viewers_row_on_a_secured_cell() {
    let _lock = tests::cell_lock();
    let dir = tests::make_certs("vizsec");
    let security = common::security::SecuritySection {
        profile: common::security::ProfileKind::Sim,
        dir: dir.display().to_string(),
        listen: None,
        listen_by_service: Default::default(),
        operators: vec!["operator".into()],
        operators_may_reset: true,
    };
    let c = TestCell::start_secure("vizsec", security, &[]);
    let s = up_all(&c).await;
    let modes = s
        .declare_subscriber(topic::MODE_COMMAND.key(&c.cell.id))
        .await
        .unwrap();
    let (l_op, l_sensor) = (
        format!("127.0.0.1:{}", tests::free_port()),
        format!("127.0.0.1:{}", tests::free_port()),
    );
    let mut viz_op = c.spawn_cli_as("operator", &["viz", "--listen", &l_op, "--seconds", "90"]);
    let mut viz_sensor =
        c.spawn_cli_as("sensor", &["viz", "--listen", &l_sensor, "--seconds", "90"]);
    let mut op = Fox::connect(&format!("ws://{l_op}")).await;
    let mut sensor = Fox::connect(&format!("ws://{l_sensor}")).await;
    op.services_advertised(&["set_mode", "tare", "estop"]).await;
    sensor.services_advertised(&["set_mode", "tare"]).await;

    // The sensor node's view: refused with the reason, nothing on the bus.
    let refused = sensor
        .call("set_mode", &json!({"mode": "hold"}), 1)
        .await
        .expect_err("the sensor node's mode request was accepted");
    assert!(refused.contains("\"sensor\" may not publish"), "{refused}");
    let tare = sensor.call("tare", &json!({}), 2).await;
    let why = tare.expect_err("the sensor node's tare was answered");
    assert!(why.contains("\"sensor\""), "{why}");
    assert!(
        modes.try_recv().ok().flatten().is_none(),
        "a mode request reached the bus from the sensor node's view"
    );

    // The operator's view: each reaches the cell.
    let r = op
        .call("set_mode", &json!({"mode": "hold"}), 3)
        .await
        .unwrap_or_else(|e| panic!("operator set_mode: {e}\n{}", c.log_text()));
    assert_eq!(r["requested"], "Hold", "{r}");
    let m = tokio::time::timeout(Duration::from_secs(3), modes.recv_async())
        .await
        .expect("the operator's mode request on the bus")
        .unwrap();
    let m: common::msg::ModeCommand = common::codec::decode(&m.payload().to_bytes()).unwrap();
    assert_eq!(m.mode, common::msg::Mode::Hold);
    op.call("tare", &json!({}), 4)
        .await
        .unwrap_or_else(|e| panic!("operator tare: {e}\n{}", c.log_text()));
    let st = op
        .call("estop", &json!({}), 5)
        .await
        .unwrap_or_else(|e| panic!("operator estop: {e}\n{}", c.log_text()));
    assert_eq!(st["level"], "EmergencyStop", "{st}");
    for v in [&mut viz_op, &mut viz_sensor] {
        let _ = v.kill();
        let _ = v.wait();
    }
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foxglove_clients_see_the_wrench_the_joints_and_the_arm_in_3d() {
    let _lock = tests::cell_lock();
    let c = TestCell::start("viz", &[]);
    let s = up_all(&c).await;
    let _ = s.close().await;
    let port = tests::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut viz = c.spawn_cli(&["viz", "--listen", &listen, "--seconds", "60"]);
    let mut fox = Fox::connect(&format!("ws://{listen}")).await;
    // serverInfo, then the channels and services.
    let wanted = [
        format!("/cell/{}/force/wrench", c.cell.id),
        format!("/cell/{}/robot/joint_state", c.cell.id),
        "/tf".to_string(),
        "/scene/arm".to_string(),
        "/log".to_string(),
    ];
    let mut info = None;
    while !(wanted.iter().all(|w| fox.channels.contains_key(w))
        && fox.services.contains_key("set_mode"))
    {
        match fox.next(Duration::from_secs(10)).await {
            Some(Ok(v)) if v["op"] == "serverInfo" => info = Some(v),
            Some(_) => {}
            None => panic!(
                "no advertisement of {wanted:?}: {:?}\n{}",
                fox.channels.keys(),
                c.log_text()
            ),
        }
    }
    assert!(info.is_some(), "serverInfo first");
    for w in &wanted {
        let ch = &fox.channels[w].1;
        assert_eq!(ch["encoding"], "json", "{w}");
        assert_eq!(ch["schemaEncoding"], "jsonschema", "{w}");
        let schema: Value = serde_json::from_str(ch["schema"].as_str().unwrap()).unwrap();
        assert!(schema.is_object(), "{w}");
    }
    assert_eq!(
        fox.channels["/tf"].1["schemaName"],
        "foxglove.FrameTransforms"
    );
    assert_eq!(
        fox.channels["/scene/arm"].1["schemaName"],
        "foxglove.SceneUpdate"
    );
    let subs: Vec<Value> = wanted
        .iter()
        .enumerate()
        .map(|(i, w)| json!({"id": i, "channelId": fox.channels[w].0}))
        .collect();
    fox.send(json!({"op": "subscribe", "subscriptions": subs}))
        .await;

    // Collect: a wrench, a joint state, and a scene with the /tf of the same time.
    let mut wrench = None;
    let mut joints = None;
    let mut tfs: BTreeMap<u64, Value> = BTreeMap::new();
    let mut scenes: Vec<(u64, Value)> = Vec::new();
    let mut logs = Vec::new();
    let mut matched = None;
    let mut called = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        let Some(m) = fox.next(Duration::from_secs(5)).await else {
            break;
        };
        match m {
            Err((sub, t, payload)) if sub != u32::MAX => {
                let v: Value = serde_json::from_slice(&payload).unwrap();
                match sub {
                    0 => wrench = Some(v),
                    1 => joints = Some(v),
                    2 => {
                        tfs.insert(t, v);
                    }
                    3 => scenes.push((t, v)),
                    4 => logs.push(v),
                    _ => {}
                }
            }
            Err((_, 3, payload)) => {
                // serviceCallResponse: service id, call id, encoding, payload.
                let enc_len = u32::from_le_bytes(payload[8..12].try_into().unwrap()) as usize;
                let body: Value = serde_json::from_slice(&payload[12 + enc_len..]).unwrap();
                assert_eq!(body["requested"], "Hold", "{body}");
            }
            Ok(v) if v["op"] == "serviceCallFailure" => panic!("service call failed: {v}"),
            _ => {}
        }
        if matched.is_none() {
            matched = scenes
                .iter()
                .find_map(|(t, sc)| tfs.get(t).map(|tf| (sc.clone(), tf.clone())));
        }
        if matched.is_some() && wrench.is_some() && joints.is_some() && !called {
            // set_mode hold through Foxglove's service call (binary op 2).
            let id = fox.services["set_mode"] as u32;
            let body = br#"{"mode":"hold"}"#;
            let mut b = vec![2u8];
            b.extend(id.to_le_bytes());
            b.extend(1u32.to_le_bytes());
            b.extend(4u32.to_le_bytes());
            b.extend(b"json");
            b.extend(body);
            fox.ws.send(Message::Binary(b.into())).await.unwrap();
            called = true;
        }
        if called
            && logs.iter().any(|l| {
                l["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("mode requested: Hold")
            })
        {
            break;
        }
    }
    let w = wrench.expect("a wrench");
    for f in ["sensor", "tool", "base"] {
        assert!(
            w[f]["force_n"].as_array().is_some_and(|a| a.len() == 3),
            "{w}"
        );
    }
    let js = joints.expect("a joint state");
    assert_eq!(js["q_rad"].as_array().unwrap().len(), 6);
    assert!(
        logs.iter().any(|l| l["message"]
            .as_str()
            .unwrap_or("")
            .contains("mode requested: Hold")),
        "the service call's mode request reached the bus (its log line): {logs:?}"
    );
    let (scene, tf) = matched.expect("a scene and its /tf at the same time");
    // The joints the scene was drawn at.
    let meta = scene["entities"][0]["metadata"].as_array().unwrap();
    let q: [f64; 6] = serde_json::from_str(
        meta.iter().find(|m| m["key"] == "q_rad").unwrap()["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let arm = kinematics::Arm::irb120();
    let links = arm.link_frames(&q).unwrap();
    for (l, name) in links.iter().zip(kinematics::fk::LINK_NAMES) {
        let t = tf["transforms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["child_frame_id"] == name)
            .unwrap_or_else(|| panic!("{name} in /tf"));
        assert_eq!(t["parent_frame_id"], "base");
        let p = nalgebra::Vector3::new(
            t["translation"]["x"].as_f64().unwrap(),
            t["translation"]["y"].as_f64().unwrap(),
            t["translation"]["z"].as_f64().unwrap(),
        );
        assert!(
            (p - l.translation.vector).norm() < 1e-9,
            "{name}: {p} vs {}",
            l.translation.vector
        );
        let r = &t["rotation"];
        let quat = nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(
            r["w"].as_f64().unwrap(),
            r["x"].as_f64().unwrap(),
            r["y"].as_f64().unwrap(),
            r["z"].as_f64().unwrap(),
        ));
        assert!(quat.angle_to(&l.rotation) < 1e-9, "{name} rotation");
    }
    // tool0 against `cell kin fk` (mm, printed to 6 decimals).
    let qs: Vec<String> = q.iter().map(|v| format!("{v:.17}")).collect();
    let mut args = vec!["kin", "fk"];
    args.extend(qs.iter().map(String::as_str));
    let (ok, out, err) = c.cli(&args);
    assert!(ok, "{err}");
    let fk: Value = serde_json::from_str(out.trim()).unwrap();
    let t0 = tf["transforms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["child_frame_id"] == "tool0")
        .unwrap();
    for (i, k) in ["x", "y", "z"].iter().enumerate() {
        let printed = fk["position_mm"][i].as_f64().unwrap();
        let seen = t0["translation"][k].as_f64().unwrap() * 1e3;
        assert!(
            (printed - seen).abs() <= 1e-6 + 1e-9,
            "tool0 {k}: {seen} mm vs cell kin fk {printed}"
        );
    }
    let _ = viz.kill();
    let _ = viz.wait();
    let (ok, _, e) = c.cli(&["mode", "idle"]);
    assert!(ok, "{e}");
}
