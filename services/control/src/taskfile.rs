//! Hybrid task files (TOML) → [`HybridTask`]. Pure parsing and checking; every problem is
//! listed at once. The format is documented in `tasks/README.md`; in short:
//!
//! ```toml
//! name = "press-table"
//! robot = "arm"                       # arm | plant
//! frame = "base"                      # base | tool | tracking
//! frame_origin_m = [0.0, 0.0, 0.0]    # base/tracking: in base; tool: in the TCP frame
//! frame_rpy_deg = [180.0, 0.0, 0.0]   # roll, pitch, yaw (fixed axes x, y, z)
//! force_axes = ["z"]                  # S: these axes of {C} are force-controlled
//! duration_s = 12.0
//! from_contact = true                 # reference time starts at first contact
//! rate_hz = 0.0                       # 0 = every robot cycle (arm); the plant needs a rate
//!
//! [reference]                         # per axis x y z rx ry rz; missing = 0
//! z = 10.0                            # constant (N on a force axis)
//! y = { ramp = { from = 0.0, to = 0.1, start_s = 2.0, duration_s = 5.0 } }   # m
//!
//! [gains]                             # optional; any field may be left out
//! kp_f = [0.0, 0.0, 5e-4, 0.0, 0.0, 0.0]
//!
//! [limits]                            # optional; any field may be left out
//! force_axis_speed_m_s = 0.005
//! ```

use common::msg::{
    Check, FrameKind, HybridGains, HybridTask, LimitRequest, Pose, Profile, TaskRobot,
};
use nalgebra::{Translation3, UnitQuaternion};
use serde::Deserialize;

use crate::hybrid::{default_arm_gains, default_plant_gains, AXES};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum ProfileTagged {
    Step {
        before: f64,
        after: f64,
        at_s: f64,
    },
    Ramp {
        from: f64,
        to: f64,
        start_s: f64,
        duration_s: f64,
    },
    Sine {
        #[serde(default)]
        offset: f64,
        amplitude: f64,
        freq_hz: f64,
        #[serde(default)]
        phase_rad: f64,
    },
    Series(Vec<[f64; 2]>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProfileFile {
    Constant(f64),
    Tagged(ProfileTagged),
}

impl From<ProfileFile> for Profile {
    fn from(p: ProfileFile) -> Self {
        match p {
            ProfileFile::Constant(v) => Profile::Constant(v),
            ProfileFile::Tagged(ProfileTagged::Step {
                before,
                after,
                at_s,
            }) => Profile::Step {
                before,
                after,
                at_s,
            },
            ProfileFile::Tagged(ProfileTagged::Ramp {
                from,
                to,
                start_s,
                duration_s,
            }) => Profile::Ramp {
                from,
                to,
                start_s,
                duration_s,
            },
            ProfileFile::Tagged(ProfileTagged::Sine {
                offset,
                amplitude,
                freq_hz,
                phase_rad,
            }) => Profile::Sine {
                offset,
                amplitude,
                freq_hz,
                phase_rad,
            },
            ProfileFile::Tagged(ProfileTagged::Series(p)) => Profile::Series(p),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct References {
    x: Option<ProfileFile>,
    y: Option<ProfileFile>,
    z: Option<ProfileFile>,
    rx: Option<ProfileFile>,
    ry: Option<ProfileFile>,
    rz: Option<ProfileFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GainsFile {
    /// Contact stiffness for the derived arm defaults (N/m), when the file gives some gains.
    stiffness_n_per_m: Option<f64>,
    loop_delay_s: Option<f64>,
    kp: Option<[f64; 6]>,
    ki: Option<[f64; 6]>,
    kd: Option<[f64; 6]>,
    kp_f: Option<[f64; 6]>,
    ki_f: Option<[f64; 6]>,
    kd_f: Option<[f64; 6]>,
    limit_n: Option<[f64; 6]>,
    feedforward: Option<f64>,
    friction_n: Option<[f64; 6]>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    force_axis_speed_m_s: Option<f64>,
    force_axis_speed_rad_s: Option<f64>,
    deviation_m: Option<f64>,
    deviation_rad: Option<f64>,
    max_force_n: Option<f64>,
    max_torque_nm: Option<f64>,
    contact_threshold_n: Option<f64>,
    contact_loss_s: Option<f64>,
    approach_timeout_s: Option<f64>,
    approach_travel_m: Option<f64>,
    reapproach_travel_m: Option<f64>,
    contact_travel_m: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RobotFile {
    Arm,
    Plant,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FrameFile {
    Base,
    Tool,
    Tracking,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    name: String,
    robot: RobotFile,
    frame: FrameFile,
    #[serde(default)]
    frame_origin_m: [f64; 3],
    #[serde(default)]
    frame_rpy_deg: [f64; 3],
    force_axes: Vec<String>,
    duration_s: f64,
    #[serde(default)]
    from_contact: bool,
    #[serde(default)]
    rate_hz: f64,
    #[serde(default)]
    reference: References,
    gains: Option<GainsFile>,
    limits: Option<LimitsFile>,
    /// The gains stay fixed (no on-line stiffness adaptation).
    #[serde(default)]
    fixed_gains: bool,
}

/// Parses a task file's text; `Err` lists every problem found.
pub fn parse(text: &str) -> Result<HybridTask, Vec<String>> {
    let f: TaskFile = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut force_axes = [false; 6];
    for a in &f.force_axes {
        match AXES.iter().position(|n| n == a) {
            Some(k) => force_axes[k] = true,
            None => errors.push(format!(
                "force_axes: unknown axis {a:?} (use x, y, z, rx, ry, rz)"
            )),
        }
    }
    let robot = match f.robot {
        RobotFile::Arm => TaskRobot::Arm,
        RobotFile::Plant => TaskRobot::Plant,
    };
    let frame_kind = match f.frame {
        FrameFile::Base => FrameKind::Base,
        FrameFile::Tool => FrameKind::Tool,
        FrameFile::Tracking => FrameKind::Tracking,
    };
    if frame_kind == FrameKind::Tracking && !force_axes[2] {
        errors.push(
            "frame = \"tracking\" follows the contact normal with z: make z a force axis".into(),
        );
    }
    let [r, p, y] = f.frame_rpy_deg.map(f64::to_radians);
    let q = UnitQuaternion::from_euler_angles(r, p, y);
    let iso = nalgebra::Isometry3::from_parts(Translation3::from(f.frame_origin_m), q);
    let qq = iso.rotation.quaternion();
    let frame = Pose {
        position_m: iso.translation.vector.into(),
        quat_wxyz: [qq.w, qq.i, qq.j, qq.k],
    };
    let refs = f.reference;
    let reference: [Profile; 6] = [refs.x, refs.y, refs.z, refs.rx, refs.ry, refs.rz]
        .map(|p| p.map(Profile::from).unwrap_or_default());
    let gains = f.gains.map(|g| {
        let base = match robot {
            TaskRobot::Plant => default_plant_gains(),
            TaskRobot::Arm => {
                let k = g.stiffness_n_per_m.unwrap_or(2e4);
                default_arm_gains([k; 3], [50.0; 3], g.loop_delay_s.unwrap_or(0.03))
            }
        };
        HybridGains {
            kp: g.kp.unwrap_or(base.kp),
            ki: g.ki.unwrap_or(base.ki),
            kd: g.kd.unwrap_or(base.kd),
            kp_f: g.kp_f.unwrap_or(base.kp_f),
            ki_f: g.ki_f.unwrap_or(base.ki_f),
            kd_f: g.kd_f.unwrap_or(base.kd_f),
            limit_n: g.limit_n.unwrap_or(base.limit_n),
            feedforward: g.feedforward.unwrap_or(base.feedforward),
            friction_n: g.friction_n.unwrap_or(base.friction_n),
        }
    });
    // A partial [limits] table tightens only the fields it names: the others stay the cell's
    // configured ceilings (control merges them, and refuses a field above its ceiling).
    let limits = f
        .limits
        .map(|l| LimitRequest {
            force_axis_speed_m_s: l.force_axis_speed_m_s,
            force_axis_speed_rad_s: l.force_axis_speed_rad_s,
            deviation_m: l.deviation_m,
            deviation_rad: l.deviation_rad,
            max_force_n: l.max_force_n,
            max_torque_nm: l.max_torque_nm,
            contact_threshold_n: l.contact_threshold_n,
            contact_loss_s: l.contact_loss_s,
            approach_timeout_s: l.approach_timeout_s,
            approach_travel_m: l.approach_travel_m,
            reapproach_travel_m: l.reapproach_travel_m,
            contact_travel_m: l.contact_travel_m,
        })
        .unwrap_or_default();
    let task = HybridTask {
        stamp: Default::default(),
        name: f.name,
        robot,
        frame_kind,
        frame,
        force_axes,
        reference,
        duration_s: f.duration_s,
        from_contact: f.from_contact,
        rate_hz: f.rate_hz,
        gains,
        limits,
        fixed_gains: f.fixed_gains,
    };
    if let Err(e) = task.check() {
        errors.push(e);
    }
    if robot == TaskRobot::Plant {
        if frame_kind != FrameKind::Base {
            errors.push("robot = \"plant\" needs frame = \"base\" (the plant plane)".into());
        }
        if task.rate_hz <= 0.0 {
            errors.push("robot = \"plant\" needs rate_hz > 0 (the paper: 60, 80, 120)".into());
        }
        if force_axes[2..].iter().any(|s| *s) {
            errors.push("robot = \"plant\" is planar: force_axes only x, y".into());
        }
    }
    if errors.is_empty() {
        Ok(task)
    } else {
        Err(errors)
    }
}

/// Reads and parses a task file.
pub fn load(path: &std::path::Path) -> Result<HybridTask, Vec<String>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    parse(&text).map_err(|es| {
        es.into_iter()
            .map(|e| format!("{}: {e}", path.display()))
            .collect()
    })
}

/// Three mutations of a text file for property tests: the character at `at` replaced by `c`,
/// the line at `at` dropped, the text cut after `cut` characters (indices taken modulo the
/// text's length).
#[cfg(test)]
pub(crate) fn text_mutations(text: &str, at: usize, c: char, cut: usize) -> [String; 3] {
    let chars: Vec<char> = text.chars().collect();
    let i = at % chars.len().max(1);
    let mut replaced = chars.clone();
    if !replaced.is_empty() {
        replaced[i] = c;
    }
    let dropped: String = text
        .lines()
        .enumerate()
        .filter(|(k, _)| *k != i % text.lines().count().max(1))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let truncated: String = chars.iter().take(cut % (chars.len() + 1)).collect();
    [replaced.into_iter().collect(), dropped, truncated]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_task_parses() {
        let t = parse(
            r#"
name = "press"
robot = "arm"
frame = "base"
frame_rpy_deg = [180.0, 0.0, 0.0]
force_axes = ["z"]
duration_s = 12.0
[reference]
z = { step = { before = 0.0, after = 10.0, at_s = 1.0 } }
y = { ramp = { from = 0.0, to = 0.1, start_s = 2.0, duration_s = 5.0 } }
x = { sine = { amplitude = 0.01, freq_hz = 0.5 } }
rz = { series = [[0.0, 0.0], [1.0, 0.1]] }
[limits]
max_force_n = 30.0
"#,
        )
        .expect("parses");
        assert_eq!(t.force_axes, [false, false, true, false, false, false]);
        assert!(matches!(t.reference[2], Profile::Step { after, .. } if after == 10.0));
        assert!(matches!(t.reference[1], Profile::Ramp { to, .. } if to == 0.1));
        assert!(matches!(t.reference[0], Profile::Sine { offset, .. } if offset == 0.0));
        assert!(matches!(t.reference[5], Profile::Series(ref p) if p.len() == 2));
        assert_eq!(t.reference[3], Profile::Constant(0.0));
        // Only the named field: the others stay the cell's (not the code's defaults).
        assert_eq!(t.limits.max_force_n, Some(30.0));
        assert_eq!(t.limits.deviation_m, None);
        assert!(t.gains.is_none());
        // z of {C} points down.
        assert!((t.frame.quat_wxyz[1].abs() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn every_problem_is_listed() {
        let e = parse(
            r#"
name = "bad"
robot = "plant"
frame = "tracking"
force_axes = ["q", "rz"]
duration_s = -1.0
"#,
        )
        .expect_err("bad");
        let all = e.join("\n");
        for want in [
            "unknown axis \"q\"",
            "make z a force axis",
            "duration_s",
            "frame = \"base\"",
        ] {
            assert!(all.contains(want), "{want} missing in:\n{all}");
        }
        assert!(parse("name = 1").is_err());
        let e = parse(
            r#"
name = "x"
robot = "arm"
frame = "base"
force_axes = []
duration_s = 1.0
[reference]
w = 1.0
"#,
        )
        .expect_err("unknown axis table key");
        assert!(e[0].contains("unknown field"), "{e:?}");
    }

    fn shipped_tasks() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks");
        let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("tasks/")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("readable");
                (p.display().to_string(), text)
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn every_shipped_task_file_parses() {
        let tasks = shipped_tasks();
        assert!(tasks.len() >= 5, "{} task files", tasks.len());
        for (name, text) in tasks {
            if let Err(e) = parse(&text) {
                panic!("{name}: {}", e.join("; "));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// A shipped task with one character replaced, a line dropped or the text cut: parsed
        /// or refused with at least one named problem, never a panic.
        #[test]
        fn mutated_task_files_are_parsed_or_refused_never_panic(
            which in 0usize..64,
            at in 0usize..4096,
            c in proptest::prelude::any::<char>(),
            cut in 0usize..4096,
        ) {
            let tasks = shipped_tasks();
            let (_, text) = &tasks[which % tasks.len()];
            for t in text_mutations(text, at, c, cut) {
                if let Err(e) = parse(&t) {
                    proptest::prop_assert!(!e.is_empty() && e.iter().all(|x| !x.is_empty()));
                }
            }
        }
    }
}
