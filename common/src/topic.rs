//! Every key expression of the cell, typed.
//!
//! Keys live under `cell/<cell-id>/…` so that `cell/**` shows a whole cell in any zenoh tool.
//! Data topics carry postcard ([`crate::codec`]); status queryables answer JSON; liveliness
//! tokens are `cell/<id>/alive/<service>`.
//!
//! ARCHITECTURE.md's topic table is generated from [`TOPICS`] by [`markdown_table`]; a test
//! fails when the two differ.

use std::marker::PhantomData;

use crate::msg;

/// Static description of one topic (used for docs, the CLI and validity tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    /// Key suffix after `cell/<cell-id>/`.
    pub suffix: &'static str,
    /// Rust type carried (postcard).
    pub type_name: &'static str,
    pub publisher: &'static str,
    pub subscribers: &'static str,
    pub rate: &'static str,
    pub qos: &'static str,
    pub frame: &'static str,
    pub doc: &'static str,
}

/// A key with the message type it carries.
pub struct Topic<T> {
    pub info: TopicInfo,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Topic<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Topic<T> {}

impl<T> Topic<T> {
    const fn new(info: TopicInfo) -> Self {
        Self {
            info,
            _t: PhantomData,
        }
    }

    /// The full key expression for a cell.
    pub fn key(&self, cell_id: &str) -> String {
        format!("cell/{cell_id}/{}", self.info.suffix)
    }
}

/// What a generic tool needs of a wire type: encode/decode and a JSON Schema of its own.
pub trait WireType: serde::Serialize + serde::de::DeserializeOwned + schemars::JsonSchema {}
impl<T: serde::Serialize + serde::de::DeserializeOwned + schemars::JsonSchema> WireType for T {}

/// A generic operation over a topic's wire type ([`visit_type`]).
pub trait TypeVisitor {
    type Out;
    fn visit<T: WireType>(self, info: &'static TopicInfo) -> Self::Out;
}

/// The wire type's name as recorders and viewers show it: `cell.msg.<Type>`.
pub fn schema_name(info: &TopicInfo) -> String {
    format!("cell.msg.{}", info.type_name.trim_start_matches("msg::"))
}

/// The zenoh encoding every publication of a topic declares: postcard, named by type and wire
/// version (`application/x-cell-postcard;cell.msg.JointState;wire=18`).
pub fn postcard_encoding(info: &TopicInfo) -> String {
    format!(
        "{POSTCARD_ENCODING};{};wire={}",
        schema_name(info),
        crate::codec::WIRE_VERSION
    )
}

/// The MIME-style name of the cell's wire framing (version byte + postcard).
pub const POSTCARD_ENCODING: &str = "application/x-cell-postcard";

/// Decodes a payload of topic `info` to JSON (the wire version checked).
pub fn to_json(info: &TopicInfo, bytes: &[u8]) -> Result<serde_json::Value, String> {
    struct Decode<'a>(&'a [u8]);
    impl TypeVisitor for Decode<'_> {
        type Out = Result<serde_json::Value, String>;
        fn visit<T: WireType>(self, _: &'static TopicInfo) -> Self::Out {
            let m: T = crate::codec::decode(self.0).map_err(|e| e.to_string())?;
            serde_json::to_value(&m).map_err(|e| e.to_string())
        }
    }
    visit_type(info.suffix, Decode(bytes))
        .unwrap_or_else(|| Err(format!("no decoder for {}", info.suffix)))
}

/// Encodes a JSON value as a message of topic `info` (version byte + postcard).
pub fn from_json(info: &TopicInfo, v: &serde_json::Value) -> Result<Vec<u8>, String> {
    struct Encode<'a>(&'a serde_json::Value);
    impl TypeVisitor for Encode<'_> {
        type Out = Result<Vec<u8>, String>;
        fn visit<T: WireType>(self, _: &'static TopicInfo) -> Self::Out {
            let m: T = serde_json::from_value(self.0.clone()).map_err(|e| e.to_string())?;
            crate::codec::encode(&m).map_err(|e| e.to_string())
        }
    }
    visit_type(info.suffix, Encode(v))
        .unwrap_or_else(|| Err(format!("no type for {}", info.suffix)))
}

/// The JSON Schema (draft 2020-12) of a topic's messages as [`to_json`] writes them.
pub fn json_schema(info: &TopicInfo) -> Option<serde_json::Value> {
    struct Schema;
    impl TypeVisitor for Schema {
        type Out = serde_json::Value;
        fn visit<T: WireType>(self, _: &'static TopicInfo) -> Self::Out {
            schemars::schema_for!(T).to_value()
        }
    }
    visit_type(info.suffix, Schema)
}

/// The topic of a full key of cell `cell_id` (`cell/<id>/<suffix>`; the deadman's
/// `control/enable/<identity>` keys map to [`ENABLE`]).
pub fn from_key(cell_id: &str, key: &str) -> Option<&'static TopicInfo> {
    let suffix = key
        .strip_prefix("cell/")?
        .strip_prefix(cell_id)?
        .strip_prefix('/')?;
    if let Some(t) = TOPICS.iter().find(|t| t.suffix == suffix) {
        return Some(t);
    }
    let enable = ENABLE.info.suffix;
    match suffix.strip_prefix(enable) {
        Some(rest) if rest.starts_with('/') => Some(&ENABLE.info),
        _ => None,
    }
}

/// The cell id and topic of a full key of any cell (`cell/<id>/<suffix>`, the deadman's
/// sub-keys included): what a recording's channel names.
pub fn split_key(key: &str) -> Option<(&str, &'static TopicInfo)> {
    let (id, _) = key.strip_prefix("cell/")?.split_once('/')?;
    Some((id, from_key(id, key)?))
}

/// Topics whose messages command something: robot-io, control or the simulated plant act on
/// them. Replaying one onto a live cell moves or stops a robot (`cell replay` skips them there).
pub fn is_command(info: &TopicInfo) -> bool {
    COMMAND_TOPICS.iter().any(|t| t.suffix == info.suffix)
}

/// Topics that stand for a device's feedback: a replayed copy on a live cell would be taken
/// for the real robot's or sensor's state.
pub fn is_device_feedback(info: &TopicInfo) -> bool {
    [
        JOINT_STATE.info,
        WRENCH_RAW.info,
        SAFETY_STATE.info,
        PLANT_STATE.info,
        SIM_TRUTH.info,
    ]
    .iter()
    .any(|t| t.suffix == info.suffix)
}

const COMMAND_TOPICS: &[TopicInfo] = &[
    JOINT_COMMAND.info,
    CARTESIAN_COMMAND.info,
    MODE_COMMAND.info,
    HYBRID_TASK.info,
    MOVE_TARGET.info,
    ENABLE.info,
    ESTOP.info,
    ESTOP_RESET.info,
    MOTION_END.info,
    PLANT_EFFORT.info,
];

/// QoS classes (see `bus`).
pub const QOS_HOT: &str = "RealTime, express, Drop";
pub const QOS_CMD: &str = "InteractiveHigh, Block";

macro_rules! topics {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = {
        suffix: $suffix:literal, publisher: $pubr:literal, subscribers: $subs:literal,
        rate: $rate:literal, qos: $qos:expr, frame: $frame:literal $(,)?
    } ),* $(,)?) => {
        $(
            $(#[doc = $doc])*
            pub const $name: Topic<$ty> = Topic::new(TopicInfo {
                suffix: $suffix,
                type_name: stringify!($ty),
                publisher: $pubr,
                subscribers: $subs,
                rate: $rate,
                qos: $qos,
                frame: $frame,
                doc: concat!($($doc),*),
            });
        )*
        /// Every data topic of the cell.
        pub const TOPICS: &[TopicInfo] = &[$($name.info),*];

        /// Calls `v` with the wire type of the topic `suffix` (one dispatch for every generic
        /// tool: `cell echo`, the recorder, replay, the live view); `None` for an unknown topic.
        pub fn visit_type<V: TypeVisitor>(suffix: &str, v: V) -> Option<V::Out> {
            $(
                if suffix == $suffix {
                    return Some(v.visit::<$ty>(&$name.info));
                }
            )*
            None
        }
    };
}

topics! {
    /// Measured joints, once per robot cycle: the cell's clock.
    JOINT_STATE: msg::JointState = {
        suffix: "robot/joint_state", publisher: "robot-io", subscribers: "control (direct chain), kinematics, cell",
        rate: "robot cycle (EGM 250 Hz)", qos: QOS_HOT, frame: "joint space",
    },
    /// robot-io's safety supervisor state (on change and at 10 Hz).
    SAFETY_STATE: msg::SafetyState = {
        suffix: "robot/safety", publisher: "robot-io", subscribers: "control, cell",
        rate: "on change + 10 Hz", qos: QOS_CMD, frame: "-",
    },
    /// Stop request: an e-stop engage or a commander's protective stop (latches until a reset).
    /// Every identity of the cell may publish it.
    ESTOP: msg::EStop = {
        suffix: "robot/estop", publisher: "cell CLI (any identity), control (protective)", subscribers: "robot-io",
        rate: "event", qos: QOS_CMD, frame: "-",
    },
    /// Reset of the e-stop latch or of a protective stop: a key of its own, so that access
    /// control can allow a stop to anyone and a reset only to the control host.
    ESTOP_RESET: msg::EStopReset = {
        suffix: "robot/reset", publisher: "cell CLI (control host; operators if the profile allows)", subscribers: "robot-io",
        rate: "event", qos: QOS_CMD, frame: "-",
    },
    /// A motion ended by its commander: robot-io holds on its next cycle.
    MOTION_END: msg::MotionEnd = {
        suffix: "robot/motion_end", publisher: "control", subscribers: "robot-io",
        rate: "event", qos: QOS_CMD, frame: "-",
    },
    /// Tool pose, TCP twist and Jacobian for each joint state.
    TOOL_POSE: msg::ToolPose = {
        suffix: "kin/tool_pose", publisher: "kinematics", subscribers: "force, control (kinematics chain)",
        rate: "robot cycle", qos: QOS_HOT, frame: "base",
    },
    /// Joint reference for the robot (the servo's step towards the Cartesian target): one
    /// commander at a time (`common::commander`).
    JOINT_COMMAND: msg::JointCommand = {
        suffix: "kin/joint_cmd", publisher: "control (direct chain, default) or kinematics (Cartesian clients, kinematics chain)", subscribers: "robot-io; the commanders",
        rate: "robot cycle", qos: QOS_HOT, frame: "joint space",
    },
    /// Raw F/T samples in the sensor frame at the device rate.
    WRENCH_RAW: msg::WrenchSample = {
        suffix: "sensor/wrench_raw", publisher: "sensor", subscribers: "force",
        rate: "device rate (≤ 2 kHz)", qos: QOS_HOT, frame: "sensor",
    },
    /// Processed wrench estimate (bias, gravity, filter) in sensor, tool and base frames.
    WRENCH_ESTIMATE: msg::WrenchEstimate = {
        suffix: "force/wrench", publisher: "force", subscribers: "control; robot-io (a clamp release's input, newest only)",
        rate: "per raw sample", qos: QOS_HOT, frame: "sensor, tool, base",
    },
    /// Cartesian reference for the kinematics service's servo (control on the kinematics
    /// chain, or an external Cartesian client).
    CARTESIAN_COMMAND: msg::CartesianCommand = {
        suffix: "control/cartesian_cmd", publisher: "control (kinematics chain), Cartesian clients", subscribers: "kinematics",
        rate: "robot cycle (while a mode is active)", qos: QOS_HOT, frame: "base",
    },
    /// Mode change request.
    MODE_COMMAND: msg::ModeCommand = {
        suffix: "control/mode", publisher: "cell CLI", subscribers: "control",
        rate: "event", qos: QOS_CMD, frame: "-",
    },
    /// Hybrid position/force task definition.
    HYBRID_TASK: msg::HybridTask = {
        suffix: "control/task", publisher: "cell CLI", subscribers: "control",
        rate: "event", qos: QOS_CMD, frame: "constraint / base",
    },
    /// Every step of a running hybrid task: references, measured force and position in {C},
    /// phase, the law's output (progress for the CLI, traces for experiments).
    HYBRID_STATE: msg::HybridState = {
        suffix: "control/hybrid_state", publisher: "control", subscribers: "cell CLI, recorders",
        rate: "law rate (while a hybrid task runs)", qos: QOS_HOT, frame: "constraint",
    },
    /// The simulated world's ground truth at the tool, for scoring (never a control input).
    SIM_TRUTH: msg::SimTruth = {
        suffix: "sim/truth", publisher: "sim", subscribers: "cell CLI (scoring)",
        rate: "EGM cycle", qos: QOS_HOT, frame: "base",
    },
    /// State of the simulated Raibert–Craig 2-DOF plant (when `sim.plant.enabled`).
    PLANT_STATE: msg::PlantState = {
        suffix: "sim/plant/state", publisher: "sim", subscribers: "control (hybrid experiments)",
        rate: "plant period (1 kHz)", qos: QOS_HOT, frame: "plant plane",
    },
    /// Effort command for the simulated 2-DOF plant (silence → zero effort).
    PLANT_EFFORT: msg::PlantEffortCommand = {
        suffix: "sim/plant/effort_cmd", publisher: "control (hybrid experiments)", subscribers: "sim",
        rate: "plant period", qos: QOS_HOT, frame: "plant joints",
    },
    /// Straight-line TCP move target (switches control to mode Move).
    MOVE_TARGET: msg::MoveTarget = {
        suffix: "control/move", publisher: "cell CLI, tests", subscribers: "control",
        rate: "event", qos: QOS_CMD, frame: "base",
    },
    /// Deadman keep-alive for hand guiding: guiding moves only while it keeps arriving. Sent on
    /// `control/enable/<identity>` ([`enable_key`]): the guide session binds its token to the
    /// requester's identity, and access control lets each identity publish only its own key.
    ENABLE: msg::Enable = {
        suffix: "control/enable", publisher: "cell guide, cell enable --token, a pendant (on …/<identity>)", subscribers: "control",
        rate: "≥ 4 Hz while guiding (cell enable: 20 Hz)", qos: QOS_CMD, frame: "-",
    },
    /// Lead-through session state (law, wrench used, commanded twist, limits, waypoints).
    GUIDE_STATE: msg::GuideState = {
        suffix: "control/guide_state", publisher: "control", subscribers: "cell CLI, recorders",
        rate: "robot cycle (while guiding)", qos: QOS_HOT, frame: "base",
    },
    /// Program playback progress.
    PLAYBACK_STATE: msg::PlaybackState = {
        suffix: "control/playback_state", publisher: "control", subscribers: "cell play, recorders",
        rate: "robot cycle (while playing)", qos: QOS_HOT, frame: "joint space",
    },
}

/// Key of control's lead-through/teach/playback request queryable (JSON in/out), under
/// `cell/<id>/`: `{"guide": {...}}`, `{"record": {}}`, `{"undo": {}}`, `{"list": {}}`,
/// `{"clear": {}}`, `{"play": {...}}`, `{"pause": {}}`, `{"resume": {}}`, `{"stop": {}}`.
pub const CONTROL_RPC_LEAD: &str = "control/rpc/lead";

/// Prefix of the kinematics request/reply queryables (`…/fk`, `…/ik`), under `cell/<id>/`.
pub const KIN_RPC_PREFIX: &str = "kin/rpc";

/// The deadman key of `identity`: `cell/<id>/control/enable/<identity>` (the plain
/// `control/enable` when `identity` is empty: a client that names none).
pub fn enable_key(cell_id: &str, identity: &str) -> String {
    if identity.is_empty() {
        ENABLE.key(cell_id)
    } else {
        format!("{}/{identity}", ENABLE.key(cell_id))
    }
}

/// Liveliness token key of a service.
pub fn alive_key(cell_id: &str, service: &str) -> String {
    format!("cell/{cell_id}/alive/{service}")
}

/// Status queryable key of a service (answers JSON [`msg::ServiceStatus`]).
pub fn status_key(cell_id: &str, service: &str) -> String {
    format!("cell/{cell_id}/{service}/status")
}

/// Looks a topic up by its suffix or full key (for the CLI).
pub fn find(name: &str) -> Option<&'static TopicInfo> {
    let suffix = name
        .strip_prefix("cell/")
        .and_then(|rest| rest.split_once('/').map(|(_, s)| s))
        .unwrap_or(name);
    TOPICS.iter().find(|t| t.suffix == suffix)
}

/// The topic table of ARCHITECTURE.md.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| key (under `cell/<id>/`) | type | publisher | subscribers | rate | QoS | frame |\n|---|---|---|---|---|---|---|\n",
    );
    for t in TOPICS {
        s.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} | {} | {} |\n",
            t.suffix, t.type_name, t.publisher, t.subscribers, t.rate, t.qos, t.frame
        ));
    }
    s.push_str(
        "| `alive/<service>` | liveliness token | every service | `cell ls` | - | - | - |\n",
    );
    s.push_str("| `<service>/status` | queryable, JSON `ServiceStatus` | every service | `cell status` | on query | - | - |\n");
    s.push_str(&format!(
        "| `{CONTROL_RPC_LEAD}` | queryable, JSON in/out | control | `cell guide/teach/play`, any tool | on query | - | base (m), joints (deg in files) |\n"
    ));
    s.push_str(&format!(
        "| `{KIN_RPC_PREFIX}/{{fk,ik}}` | queryable, JSON in/out | kinematics | any tool | on query | - | base, tool0 (mm, deg) |\n"
    ));
    s
}

/// Checks that a cell id is a single, plain key chunk.
pub fn valid_cell_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_valid_and_unique() {
        let mut seen = HashSet::new();
        for t in TOPICS {
            let key = format!("cell/test/{}", t.suffix);
            assert!(
                zenoh::key_expr::KeyExpr::try_from(key.as_str()).is_ok(),
                "invalid key {key}"
            );
            assert!(
                !key.contains('*') && !key.contains('$'),
                "wildcard in {key}"
            );
            assert!(seen.insert(t.suffix), "duplicate {}", t.suffix);
            assert!(!t.doc.is_empty(), "{} undocumented", t.suffix);
            // No topic may collide with the liveliness or status namespaces.
            assert!(!t.suffix.starts_with("alive/") && !t.suffix.ends_with("/status"));
        }
        assert!(zenoh::key_expr::KeyExpr::try_from(alive_key("a", "robot-io")).is_ok());
        assert!(zenoh::key_expr::KeyExpr::try_from(status_key("a", "robot-io")).is_ok());
    }

    #[test]
    fn find_by_suffix_or_key() {
        assert_eq!(
            find("robot/joint_state").map(|t| t.suffix),
            Some("robot/joint_state")
        );
        assert_eq!(
            find("cell/sim/force/wrench").map(|t| t.suffix),
            Some("force/wrench")
        );
        assert!(find("nope").is_none());
    }

    #[test]
    fn architecture_md_topic_table_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ARCHITECTURE.md");
        let doc = std::fs::read_to_string(path).expect("ARCHITECTURE.md readable");
        let begin = "<!-- topic-table:begin -->\n";
        let end = "<!-- topic-table:end -->";
        let start = doc.find(begin).expect("begin marker") + begin.len();
        let stop = doc.find(end).expect("end marker");
        let table = markdown_table();
        if doc[start..stop] != table {
            if std::env::var_os("UPDATE_DOCS").is_some() {
                let new = format!("{}{}{}", &doc[..start], table, &doc[stop..]);
                std::fs::write(path, new).expect("write ARCHITECTURE.md");
            } else {
                panic!("ARCHITECTURE.md topic table is stale: run `UPDATE_DOCS=1 cargo test -p common`\nexpected:\n{table}");
            }
        }
    }

    #[test]
    fn every_topic_has_a_type_a_schema_and_an_encoding() {
        for t in TOPICS {
            let schema = json_schema(t).unwrap_or_else(|| panic!("{} has no schema", t.suffix));
            assert_eq!(
                schema["title"],
                t.type_name.trim_start_matches("msg::"),
                "{}",
                t.suffix
            );
            assert!(postcard_encoding(t).contains(&format!("wire={}", crate::codec::WIRE_VERSION)));
        }
        // JSON both ways, through the dispatch.
        let js = msg::JointState {
            q_rad: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            ..Default::default()
        };
        let bytes = crate::codec::encode(&js).expect("encodable");
        let v = to_json(&JOINT_STATE.info, &bytes).expect("decodes");
        assert_eq!(v["q_rad"][5], 0.6);
        assert_eq!(from_json(&JOINT_STATE.info, &v).expect("encodes"), bytes);
        assert!(to_json(&JOINT_STATE.info, &bytes[..3]).is_err());
        let end = crate::codec::encode(&msg::MotionEnd::default()).expect("encodable");
        assert!(
            to_json(&MOTION_END.info, &end).is_ok(),
            "cell echo decodes robot/motion_end"
        );
    }

    #[test]
    fn keys_map_back_to_their_topics() {
        assert_eq!(
            from_key("c", "cell/c/force/wrench").map(|t| t.suffix),
            Some("force/wrench")
        );
        assert_eq!(
            from_key("c", &enable_key("c", "operator")).map(|t| t.suffix),
            Some("control/enable")
        );
        assert!(from_key("c", "cell/d/force/wrench").is_none());
        assert!(from_key("c", "cell/c/control/enablex").is_none());
        assert!(from_key("c", "cell/c/robot-io/status").is_none());
        assert_eq!(
            split_key("cell/c1/control/enable/op").map(|(id, t)| (id, t.suffix)),
            Some(("c1", "control/enable"))
        );
        assert!(split_key("raw/cell/c/force/wrench").is_none());
        assert!(is_command(&ESTOP_RESET.info) && is_command(&JOINT_COMMAND.info));
        assert!(!is_command(&WRENCH_ESTIMATE.info) && is_device_feedback(&JOINT_STATE.info));
    }

    #[test]
    fn cell_ids() {
        assert!(valid_cell_id("sim-1"));
        assert!(!valid_cell_id(""));
        assert!(!valid_cell_id("a/b"));
        assert!(!valid_cell_id("a*"));
    }
}
