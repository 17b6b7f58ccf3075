//! The IRC5 side of the EGM link as the repository ships it (`deploy/irc5/`): the RAPID module
//! `CellEgm.mod` and the configuration entries it relies on (`SIO_cell.cfg`: the UDPUC device;
//! `MOC_cell.cfg`: the external-motion data). This module reads them, so that the simulated IRC5
//! runs the parameters a real controller is loaded with (sample rate, communication timeout,
//! ramps, stop mode, restart wait) and tests can hold them against the cell's config.
//!
//! Pure: text in, values out. What it understands of RAPID is deliberately small — one
//! instruction or `CONST` per line, arguments that are literals or `CONST` names — and anything
//! it cannot read is an error naming the line, never a default.

use std::{collections::BTreeMap, path::Path};

use serde::{Deserialize, Serialize};

/// The files as built into this binary (the checkout's `deploy/irc5/`).
pub const BUILTIN_RAPID: &str = include_str!("../../../deploy/irc5/CellEgm.mod");
pub const BUILTIN_SIO: &str = include_str!("../../../deploy/irc5/SIO_cell.cfg");
pub const BUILTIN_MOC: &str = include_str!("../../../deploy/irc5/MOC_cell.cfg");
/// The files' names in an IRC5 directory.
pub const RAPID_FILE: &str = "CellEgm.mod";
pub const SIO_FILE: &str = "SIO_cell.cfg";
pub const MOC_FILE: &str = "MOC_cell.cfg";

/// How `EGMRunJoint` ends a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopMode {
    /// `EGM_STOP_HOLD`: the arm stops where it is (its reference speed ramped to zero over the
    /// ramp-out time).
    Hold,
    /// `EGM_STOP_RAMP_DOWN`: the corrections ramp back to zero (the programmed path). The
    /// cell's joint sessions have no programmed path: refused by [`Irc5Egm::check`].
    RampDown,
}

/// One EGM joint session as `CellEgm.mod` runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EgmSession {
    /// `EGMActJoint \SampleRate` (ms): one `EgmRobot` per this period.
    pub sample_rate_ms: f64,
    /// `EGMSetupUC \CommTimeout` (s): no reply for this long ends the session.
    pub comm_timeout_s: f64,
    /// `EGMRunJoint \RampInTime` (s).
    pub ramp_in_s: f64,
    /// `EGMRunJoint \RampOutTime` (s).
    pub ramp_out_s: f64,
    /// `EGMRunJoint`'s stop mode.
    pub stop_mode: StopMode,
    /// `EGMRunJoint \PosCorrGain`.
    pub pos_corr_gain: f64,
    /// `EGMActJoint \MaxSpeedDeviation` (deg/s).
    pub max_speed_deviation_deg_s: f64,
    /// `EGMRunJoint \CondTime` (s).
    pub cond_time_s: f64,
    /// The RAPID loop's `WaitTime` before a new session after one ended (s).
    pub restart_wait_s: f64,
    /// `EGMSetupUC`'s external-motion data name (MOC) and UDPUC device name (SIO).
    pub motion_data: String,
    pub uc_device: String,
}

/// A UDPUC transmission-protocol entry (SIO `COM_TRP`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpUcDevice {
    pub name: String,
    pub remote_address: String,
    pub remote_port: u16,
    pub local_port: u16,
}

/// The whole IRC5 side: the session, its UDP device and its external-motion data entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Irc5Egm {
    pub session: EgmSession,
    pub device: UdpUcDevice,
    /// The MOC `EXT_MOTION_DATA` entry's attributes (a flag without a value maps to "").
    pub motion_data: BTreeMap<String, String>,
    /// What the module does around the session (its routines, moves, tool and error
    /// handling), for [`Irc5Egm::lint`].
    pub module: ModuleFacts,
}

/// A `jointtarget`'s robot axes (deg; the external axes are not read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointTarget {
    pub name: String,
    pub deg: [f64; 6],
}

/// A `tooldata` (`[robhold, tframe, tload]`): the TCP in tool0 (mm, quaternion w x y z) and the
/// load the controller's motion and collision supervision model (kg, centre of gravity in
/// tool0 in mm, inertia axes' orientation and moments in kg·m²).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolData {
    pub name: String,
    pub robhold: bool,
    pub tframe_mm: [f64; 3],
    pub tframe_q: [f64; 4],
    pub mass_kg: f64,
    pub cog_mm: [f64; 3],
    pub aom_q: [f64; 4],
    pub inertia_kg_m2: [f64; 3],
}

/// What the module does around the session, as read (line numbers are 1-based).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleFacts {
    /// The module's routines in order: (name, kind `PROC`/`FUNC`/`TRAP`, LOCAL, first line).
    pub routines: Vec<(String, String, bool, usize)>,
    /// The routine an operator starts (the first routine that is not LOCAL).
    pub entry: Option<String>,
    /// The routine holding `EGMSetupUC` and the one holding `EGMActJoint`.
    pub setup_routine: Option<String>,
    pub act_routine: Option<String>,
    /// `EGMActJoint`'s line.
    pub act_line: usize,
    /// The entry routine's first motion: a `MoveAbsJ` to a taught `jointtarget`.
    pub home: Option<JointTarget>,
    /// Every `MoveAbsJ`: (line, routine, target, zone).
    pub moves: Vec<(usize, String, String, String)>,
    /// Every `WaitRob \InPos`: (line, routine).
    pub inpos_waits: Vec<(usize, String)>,
    /// `EGMActJoint \Tool` (None: not given) and the `tooldata` it names when the module
    /// declares it (`tool0` is the controller's own: no load).
    pub tool_name: Option<String>,
    pub tool: Option<ToolData>,
    /// Lines that `RAISE` an error to a caller.
    pub raise_lines: Vec<usize>,
    /// Where the run flag `cell_egm_run` is set TRUE: (line, routine).
    pub run_flag_set: Vec<(usize, String)>,
    /// `EGMActJoint`'s convergence band `\J1..\J6` (deg, min/max of the reference minus the
    /// position), when it names an `egm_minmax`.
    pub cond_deg: Option<[f64; 2]>,
}

impl Irc5Egm {
    /// Reads the three files from `dir`.
    pub fn load_dir(dir: &Path) -> Result<Self, Vec<String>> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map_err(|e| vec![format!("{}: cannot read: {e}", dir.join(f).display())])
        };
        Self::parse(&read(RAPID_FILE)?, &read(SIO_FILE)?, &read(MOC_FILE)?)
    }

    /// The files built into this binary.
    pub fn builtin() -> Result<Self, Vec<String>> {
        Self::parse(BUILTIN_RAPID, BUILTIN_SIO, BUILTIN_MOC)
    }

    /// Whether every session starts from a fine point: the session routine runs
    /// `WaitRob \InPos` and a `MoveAbsJ … fine` before `EGMActJoint` (what a real controller
    /// requires; the emulator refuses a session started without it).
    pub fn waits_for_fine_point(&self) -> bool {
        let m = &self.module;
        let act = m.act_line;
        m.inpos_waits
            .iter()
            .any(|(l, r)| *l < act && Some(r) == m.act_routine.as_ref())
            && m.moves
                .iter()
                .any(|(l, r, _, z)| *l < act && z == "fine" && Some(r) == m.act_routine.as_ref())
    }

    /// Whether the controller restarts an EGM session on its own when the motors come back on:
    /// not when the MOC entry carries `-do_not_restart_after_motors_off` (then the operator
    /// starts the program again).
    pub fn restarts_after_motors_off(&self) -> bool {
        !self
            .motion_data
            .contains_key("do_not_restart_after_motors_off")
    }

    /// Parses the RAPID module and the two configuration files, and checks that they name each
    /// other and hold values the cell can run with. Every problem is listed.
    pub fn parse(rapid: &str, sio: &str, moc: &str) -> Result<Self, Vec<String>> {
        let mut errors = Vec::new();
        let parsed = parse_rapid(rapid).map_err(|e| {
            e.into_iter()
                .map(|x| format!("{RAPID_FILE}: {x}"))
                .collect::<Vec<_>>()
        });
        let devices = parse_cfg(sio, "COM_TRP").map_err(|e| format!("{SIO_FILE}: {e}"));
        let motion = parse_cfg(moc, "EXT_MOTION_DATA").map_err(|e| format!("{MOC_FILE}: {e}"));
        let (session, module) = match parsed {
            Ok((s, m)) => (Some(s), m),
            Err(e) => {
                errors.extend(e);
                (None, ModuleFacts::default())
            }
        };
        let devices = devices.map_err(|e| errors.push(e)).ok();
        let motion = motion.map_err(|e| errors.push(e)).ok();
        let (Some(session), Some(devices), Some(motion)) = (session, devices, motion) else {
            return Err(errors);
        };
        let device = devices
            .iter()
            .find(|d| d.get("Name").map(String::as_str) == Some(session.uc_device.as_str()));
        let device = match device {
            None => {
                errors.push(format!(
                    "{SIO_FILE}: no COM_TRP entry -Name \"{}\" (the device {RAPID_FILE} names in EGMSetupUC)",
                    session.uc_device
                ));
                None
            }
            Some(d) => udp_device(d)
                .map_err(|e| errors.push(format!("{SIO_FILE}: {e}")))
                .ok(),
        };
        let motion_data = motion
            .into_iter()
            .find(|d| d.get("name").map(String::as_str) == Some(session.motion_data.as_str()));
        if motion_data.is_none() {
            errors.push(format!(
                "{MOC_FILE}: no EXT_MOTION_DATA entry -name \"{}\" (the data {RAPID_FILE} names in EGMSetupUC)",
                session.motion_data
            ));
        }
        let (Some(device), Some(motion_data)) = (device, motion_data) else {
            return Err(errors);
        };
        let me = Self {
            session,
            device,
            motion_data,
            module,
        };
        errors.extend(me.check());
        if errors.is_empty() {
            Ok(me)
        } else {
            Err(errors)
        }
    }

    /// What the cell needs of the session's values (each problem named).
    pub fn check(&self) -> Vec<String> {
        let s = &self.session;
        let mut e = Vec::new();
        if !(s.sample_rate_ms >= 4.0 && (s.sample_rate_ms / 4.0).fract() == 0.0) {
            e.push(format!(
                "\\SampleRate {} ms: EGM takes a multiple of 4 ms, at least 4",
                s.sample_rate_ms
            ));
        }
        if !(s.comm_timeout_s > 0.0 && s.comm_timeout_s.is_finite()) {
            e.push(format!(
                "\\CommTimeout {} s: must be a positive time (it bounds how long a silent PC leaves the arm on its last reference)",
                s.comm_timeout_s
            ));
        }
        for (name, v) in [
            ("\\RampInTime", s.ramp_in_s),
            ("\\RampOutTime", s.ramp_out_s),
            ("the restart WaitTime", s.restart_wait_s),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                e.push(format!("{name} {v} s: must be ≥ 0"));
            }
        }
        if s.stop_mode != StopMode::Hold {
            e.push("EGMRunJoint's stop mode: the cell needs EGM_STOP_HOLD (a joint session has no programmed path to ramp down to)".into());
        }
        if s.pos_corr_gain != 1.0 {
            e.push(format!(
                "\\PosCorrGain {}: robot-io streams positions; 1 makes its reference the arm's (0 would run on speedRef alone)",
                s.pos_corr_gain
            ));
        }
        if s.max_speed_deviation_deg_s.is_nan() || s.max_speed_deviation_deg_s <= 0.0 {
            e.push(format!(
                "\\MaxSpeedDeviation {} deg/s: must be positive",
                s.max_speed_deviation_deg_s
            ));
        }
        if self.device.remote_port == 0 {
            e.push(format!(
                "{SIO_FILE}: -RemotePortNumber 0: robot-io's port is needed"
            ));
        }
        e
    }
}

/// The slowest axis's maximum speed on an IRB 120 (deg/s; A1–A3): ABB's bound for
/// `\MaxSpeedDeviation`.
pub const IRB120_SLOWEST_AXIS_DEG_S: f64 = 250.0;

impl Irc5Egm {
    /// The rules ABB's own EGM modules follow and a real controller enforces, each broken one
    /// named with its line and what a first session on a real arm would do. The simulator can
    /// run a module that breaks them (it parses), so these are reported by `cell commission` and
    /// the deploy tests, not by [`Irc5Egm::parse`]. `slowest_axis_deg_s`: the arm's slowest
    /// axis's maximum speed ([`IRB120_SLOWEST_AXIS_DEG_S`] for the IRB 120).
    ///
    /// Sources (reference/protocols.md §1.8 and ABB's StateMachine module `TRobEGM.sys`): EGM
    /// motion starts and ends in a fine point and the first movement after a controller
    /// restart cannot be an EGM movement (`WaitRob \InPos` and a `MoveAbsJ … fine` first);
    /// the load is passed when the arm carries one; `\MaxSpeedDeviation` not above the lowest
    /// axis's maximum speed; every session re-runs `EGMSetupUC` and handles its errors.
    pub fn lint(&self, slowest_axis_deg_s: f64) -> Vec<String> {
        let m = &self.module;
        let s = &self.session;
        let mut e = Vec::new();
        let act = m.act_line;
        match &m.entry {
            None => e.push(format!("{RAPID_FILE}: no routine an operator can start (every PROC is LOCAL)")),
            Some(n) if n.eq_ignore_ascii_case("main") => e.push(format!(
                "{RAPID_FILE}: the routine is named {n}: it clashes with the main of T_ROB1's own program; name it (CellEgmRun) and start it with PP to Routine or call it"
            )),
            Some(_) => {}
        }
        let fine_before = m
            .moves
            .iter()
            .filter(|(l, _, _, z)| *l < act && z == "fine")
            .count();
        if fine_before == 0 {
            e.push(format!(
                "{RAPID_FILE}: no MoveAbsJ … fine before EGMActJoint (line {act}): EGM motion must start in a fine point, and the first motion after a controller restart cannot be an EGM motion, so a real controller refuses the session"
            ));
        }
        if !m
            .inpos_waits
            .iter()
            .any(|(l, r)| *l < act && Some(r) == m.act_routine.as_ref())
        {
            e.push(format!(
                "{RAPID_FILE}: no WaitRob \\InPos before EGMActJoint (line {act}) in {}: every session must start with the arm at rest in position",
                m.act_routine.as_deref().unwrap_or("its routine")
            ));
        }
        if m.home.is_none() {
            e.push(format!(
                "{RAPID_FILE}: the entry routine does not start with a MoveAbsJ to a taught jointtarget: after a controller restart the first motion must not be EGM"
            ));
        }
        for (l, _, t, z) in &m.moves {
            if z != "fine" {
                e.push(format!(
                    "{RAPID_FILE}: line {l}: MoveAbsJ {t} ends in zone {z}: EGM needs a fine point (zone fine)"
                ));
            }
        }
        match (&m.tool_name, &m.tool) {
            (None, _) => e.push(format!(
                "{RAPID_FILE}: EGMActJoint (line {act}) without \\Tool: the controller models the arm as carrying nothing"
            )),
            (Some(n), None) if n.eq_ignore_ascii_case("tool0") => e.push(format!(
                "{RAPID_FILE}: EGMActJoint \\Tool:=tool0: no load while the arm carries the F/T sensor and the tool, so the controller's motion and collision supervision run on a wrong model; declare a PERS tooldata with the load (`cell payload identify`)"
            )),
            (Some(n), None) => e.push(format!(
                "{RAPID_FILE}: EGMActJoint \\Tool:={n}: no PERS tooldata {n} in the module (its load cannot be checked)"
            )),
            (Some(_), Some(t)) if t.mass_kg <= 0.001 => e.push(format!(
                "{RAPID_FILE}: tooldata {}: load {} kg: give the mass the arm carries below tool0 (F/T sensor and tool)",
                t.name, t.mass_kg
            )),
            _ => {}
        }
        if s.max_speed_deviation_deg_s > slowest_axis_deg_s {
            e.push(format!(
                "{RAPID_FILE}: \\MaxSpeedDeviation {} deg/s is above the slowest axis's maximum speed ({} deg/s): ABB's guidance is not to exceed it",
                s.max_speed_deviation_deg_s, slowest_axis_deg_s
            ));
        }
        if m.setup_routine != m.act_routine {
            e.push(format!(
                "{RAPID_FILE}: EGMSetupUC runs in {} and EGMActJoint in {}: every session must re-run EGMReset, EGMGetId and EGMSetupUC",
                m.setup_routine.as_deref().unwrap_or("?"),
                m.act_routine.as_deref().unwrap_or("?")
            ));
        }
        for l in &m.raise_lines {
            e.push(format!(
                "{RAPID_FILE}: line {l}: RAISE passes an EGM error up to a caller without a handler, which stops the program; end the session cleanly in the handler"
            ));
        }
        if !m
            .run_flag_set
            .iter()
            .any(|(_, r)| Some(r) == m.entry.as_ref())
        {
            e.push(format!(
                "{RAPID_FILE}: the entry routine never sets cell_egm_run := TRUE: after a clean stop the flag stays FALSE and the next start leaves at once"
            ));
        }
        e
    }
}

/// What one cell config says about the EGM link, for [`Irc5Egm::disagreements`].
#[derive(Debug, Clone, PartialEq)]
pub struct CellEgmSide {
    /// The config's name, for messages.
    pub config: String,
    /// `[robot_io.egm] bind`.
    pub bind: std::net::SocketAddr,
    /// `[robot_io] command_timeout_ms`.
    pub command_timeout_ms: f64,
    /// `[robot_io.egm] silence_timeout_ms`.
    pub silence_timeout_ms: f64,
    /// `[sim.egm] cycle_ms` and `[sim.egm] robot_io` when the config runs the simulated IRC5.
    pub sim: Option<(f64, std::net::SocketAddr)>,
    /// A config for a real controller: robot-io's address must be the one the controller sends
    /// to.
    pub real: bool,
    /// The fastest joint speed robot-io's reference may have (deg/s): `[arm.limits]` capped
    /// at `[robot_io.egm] max_joint_speed_deg_s`.
    pub max_joint_speed_deg_s: f64,
    /// `[robot_io.egm] controller`: the one address (and port, if pinned) robot-io answers.
    pub controller: Option<(std::net::IpAddr, Option<u16>)>,
    /// `[sim.egm] bind`: where the simulated IRC5 sends from, when the config runs it.
    pub sim_controller_bind: Option<std::net::SocketAddr>,
}

impl Irc5Egm {
    /// Where this IRC5 side and a cell config disagree (port, address, cycle, timeouts), each
    /// named with both values. Empty: they agree.
    pub fn disagreements(&self, c: &CellEgmSide) -> Vec<String> {
        let mut e = Vec::new();
        let s = &self.session;
        let d = &self.device;
        if c.bind.port() != d.remote_port {
            e.push(format!(
                "{}: robot_io.egm.bind port {} ≠ {SIO_FILE} -RemotePortNumber {} (the controller would send to a port nobody listens on)",
                c.config,
                c.bind.port(),
                d.remote_port
            ));
        }
        if c.real {
            if c.bind.ip().is_unspecified() {
                e.push(format!(
                    "{}: robot_io.egm.bind {}: name the PC's address on the controller's network so it can be checked against {SIO_FILE} -RemoteAdress {}",
                    c.config, c.bind, d.remote_address
                ));
            } else if c.bind.ip().to_string() != d.remote_address {
                e.push(format!(
                    "{}: robot_io.egm.bind address {} ≠ {SIO_FILE} -RemoteAdress {} (the controller would send elsewhere)",
                    c.config,
                    c.bind.ip(),
                    d.remote_address
                ));
            }
        }
        if let Some((cycle_ms, target)) = c.sim {
            if (cycle_ms - s.sample_rate_ms).abs() > 1e-9 {
                e.push(format!(
                    "{}: sim.egm.cycle_ms {cycle_ms} ≠ {RAPID_FILE} \\SampleRate {} ms",
                    c.config, s.sample_rate_ms
                ));
            }
            if target != c.bind {
                e.push(format!(
                    "{}: sim.egm.robot_io {target} ≠ robot_io.egm.bind {} (the simulated controller would send elsewhere)",
                    c.config, c.bind
                ));
            }
        }
        match c.controller {
            None => e.push(format!(
                "{}: robot_io.egm.controller unset: robot-io would answer, and take joint states and session restarts from, any host that sends it a datagram (pin the controller's address)",
                c.config
            )),
            Some((ip, port)) => {
                if c.real {
                    match port {
                        Some(p) if d.local_port == 0 => e.push(format!(
                            "{}: robot_io.egm.controller pins port {p}, but {SIO_FILE} -LocalPortNumber 0 lets the controller pick its source port: pin the address only, or fix LocalPortNumber",
                            c.config
                        )),
                        Some(p) if p != d.local_port => e.push(format!(
                            "{}: robot_io.egm.controller port {p} ≠ {SIO_FILE} -LocalPortNumber {} (every datagram would be a stranger's)",
                            c.config, d.local_port
                        )),
                        _ => {}
                    }
                }
                if let Some(b) = c.sim_controller_bind {
                    if b.ip() != ip || port.is_some_and(|p| p != b.port()) {
                        e.push(format!(
                            "{}: robot_io.egm.controller {ip}{} does not admit the simulated IRC5 at sim.egm.bind {b} (every datagram would be a stranger's)",
                            c.config,
                            port.map(|p| format!(":{p}")).unwrap_or_default()
                        ));
                    }
                }
            }
        }
        if c.max_joint_speed_deg_s > s.max_speed_deviation_deg_s + 1e-9 {
            e.push(format!(
                "{}: robot-io lets a joint move at {} deg/s > {RAPID_FILE} \\MaxSpeedDeviation {} deg/s (the controller would end the session with an EGM error): set robot_io.egm.max_joint_speed_deg_s",
                c.config, c.max_joint_speed_deg_s, s.max_speed_deviation_deg_s
            ));
        }
        if c.command_timeout_ms < s.sample_rate_ms {
            e.push(format!(
                "{}: robot_io.command_timeout_ms {} < one EGM cycle ({} ms): every command would be stale",
                c.config, c.command_timeout_ms, s.sample_rate_ms
            ));
        }
        if c.silence_timeout_ms < 2.0 * s.sample_rate_ms {
            e.push(format!(
                "{}: robot_io.egm.silence_timeout_ms {} < two EGM cycles ({} ms): one late datagram would hold the robot",
                c.config,
                c.silence_timeout_ms,
                2.0 * s.sample_rate_ms
            ));
        }
        if c.silence_timeout_ms >= s.comm_timeout_s * 1e3 {
            e.push(format!(
                "{}: robot_io.egm.silence_timeout_ms {} ≥ {RAPID_FILE} \\CommTimeout {} ms: robot-io must notice a lost link before the controller gives up on it",
                c.config,
                c.silence_timeout_ms,
                s.comm_timeout_s * 1e3
            ));
        }
        e
    }
}

/// Strips a RAPID comment (`!` outside a string) from one line.
fn strip_comment(line: &str) -> &str {
    let mut in_str = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_str = !in_str,
            '!' if !in_str => return &line[..i],
            _ => {}
        }
    }
    line
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Num(f64),
    Str(String),
    JointTarget([f64; 6]),
    Tool(ToolData),
    MinMax([f64; 2]),
    Other(String),
}

/// A RAPID aggregate value (`[a, [b, c], …]`) as a tree of atoms.
#[derive(Debug, Clone, PartialEq)]
enum Agg {
    Atom(String),
    List(Vec<Agg>),
}

fn parse_agg(text: &str) -> Result<Agg, String> {
    fn list(chars: &[char], i: &mut usize) -> Result<Agg, String> {
        // chars[*i] == '['
        *i += 1;
        let mut items = Vec::new();
        let mut atom = String::new();
        while *i < chars.len() {
            let c = chars[*i];
            match c {
                '[' => {
                    items.push(list(chars, i)?);
                    continue;
                }
                ',' | ']' => {
                    let a = atom.trim();
                    if !a.is_empty() {
                        items.push(Agg::Atom(a.to_string()));
                    }
                    atom.clear();
                    *i += 1;
                    if c == ']' {
                        return Ok(Agg::List(items));
                    }
                    continue;
                }
                c => atom.push(c),
            }
            *i += 1;
        }
        Err("an aggregate without its closing ']'".into())
    }
    let chars: Vec<char> = text.trim().chars().collect();
    if chars.first() != Some(&'[') {
        return Err(format!("not an aggregate: {text}"));
    }
    let mut i = 0;
    let v = list(&chars, &mut i)?;
    if chars[i..].iter().any(|c| !c.is_whitespace()) {
        return Err(format!("text after the aggregate: {text}"));
    }
    Ok(v)
}

impl Agg {
    fn items(&self, n: usize, what: &str) -> Result<&[Agg], String> {
        match self {
            Agg::List(v) if v.len() == n => Ok(v),
            _ => Err(format!("{what}: expected a list of {n}")),
        }
    }
    fn num(&self, what: &str) -> Result<f64, String> {
        match self {
            Agg::Atom(a) => a
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{what}: {a} is not a number")),
            Agg::List(_) => Err(format!("{what}: a list where a number belongs")),
        }
    }
    fn nums<const N: usize>(&self, what: &str) -> Result<[f64; N], String> {
        let v = self.items(N, what)?;
        let mut out = [0.0; N];
        for (o, a) in out.iter_mut().zip(v) {
            *o = a.num(what)?;
        }
        Ok(out)
    }
    fn boolean(&self, what: &str) -> Result<bool, String> {
        match self {
            Agg::Atom(a) if a == "TRUE" => Ok(true),
            Agg::Atom(a) if a == "FALSE" => Ok(false),
            _ => Err(format!("{what}: expected TRUE or FALSE")),
        }
    }
}

/// `jointtarget`: `[[j1..j6 deg], [e1..e6]]`.
fn joint_target(a: &Agg) -> Result<[f64; 6], String> {
    let v = a.items(2, "jointtarget [robax, extax]")?;
    v[0].nums::<6>("jointtarget robax")
}

/// `tooldata`: `[robhold, [[x,y,z],[q1..q4]], [mass, [cx,cy,cz], [q1..q4], ix, iy, iz]]`.
fn tool_data(name: &str, a: &Agg) -> Result<ToolData, String> {
    let v = a.items(3, "tooldata [robhold, tframe, tload]")?;
    let robhold = v[0].boolean("tooldata robhold")?;
    let tframe = v[1].items(2, "tooldata tframe [trans, rot]")?;
    let tload = v[2].items(6, "tooldata tload [mass, cog, aom, ix, iy, iz]")?;
    Ok(ToolData {
        name: name.to_string(),
        robhold,
        tframe_mm: tframe[0].nums::<3>("tooldata tframe trans")?,
        tframe_q: tframe[1].nums::<4>("tooldata tframe rot")?,
        mass_kg: tload[0].num("tooldata tload mass")?,
        cog_mm: tload[1].nums::<3>("tooldata tload cog")?,
        aom_q: tload[2].nums::<4>("tooldata tload aom")?,
        inertia_kg_m2: [
            tload[3].num("tooldata tload ix")?,
            tload[4].num("tooldata tload iy")?,
            tload[5].num("tooldata tload iz")?,
        ],
    })
}

/// The RAPID module `rapid` with the load of its `tooldata` `tool` replaced: `mass_kg` at
/// `cog_mm` (in tool0, mm), axes of moment aligned with tool0 and inertia 0 (a point mass, what
/// ABB's load data means when the moments are unknown). The TCP (`tframe`) and every other line
/// are kept byte for byte. What `cell payload identify --write-irc5` writes.
pub fn with_tool_load(
    rapid: &str,
    tool: &str,
    mass_kg: f64,
    cog_mm: [f64; 3],
) -> Result<String, String> {
    if !(mass_kg.is_finite() && mass_kg > 0.0 && cog_mm.iter().all(|c| c.is_finite())) {
        return Err(format!(
            "load {mass_kg} kg at {cog_mm:?} mm: the mass must be > 0 and every value finite"
        ));
    }
    let mut out = String::with_capacity(rapid.len() + 64);
    let mut found = 0;
    for line in rapid.split_inclusive('\n') {
        let decl = parse_const(line);
        match decl {
            Some(Ok((name, Value::Tool(t)))) if name == tool => {
                found += 1;
                let (head, _) = line
                    .split_once(":=")
                    .ok_or_else(|| format!("tooldata {tool}: no ':='"))?;
                let n = |v: f64| {
                    let r = (v * 1e4).round() / 1e4;
                    if r == 0.0 {
                        "0".to_string()
                    } else {
                        format!("{r}")
                    }
                };
                let ending = if line.ends_with("\r\n") {
                    "\r\n"
                } else if line.ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "{} := [{}, [[{}, {}, {}], [{}, {}, {}, {}]], [{}, [{}, {}, {}], [1, 0, 0, 0], 0, 0, 0]];{ending}",
                    head.trim_end(),
                    if t.robhold { "TRUE" } else { "FALSE" },
                    n(t.tframe_mm[0]), n(t.tframe_mm[1]), n(t.tframe_mm[2]),
                    n(t.tframe_q[0]), n(t.tframe_q[1]), n(t.tframe_q[2]), n(t.tframe_q[3]),
                    n(mass_kg), n(cog_mm[0]), n(cog_mm[1]), n(cog_mm[2]),
                ));
            }
            Some(Err(e)) if line.contains(tool) => return Err(e),
            _ => out.push_str(line),
        }
    }
    match found {
        1 => Ok(out),
        0 => Err(format!(
            "no tooldata {tool} declared on one line in the module"
        )),
        n => Err(format!("{n} declarations of tooldata {tool}")),
    }
}

/// `[LOCAL|TASK] (CONST|PERS|VAR) <type> <name> := <value>;` → (name, value). A `VAR` or
/// `PERS` declared without a value is not one (None).
fn parse_const(line: &str) -> Option<Result<(String, Value), String>> {
    let l = line.trim();
    let mut rest = l;
    for prefix in ["LOCAL ", "TASK "] {
        rest = rest
            .strip_prefix(prefix)
            .map(str::trim_start)
            .unwrap_or(rest);
    }
    let (kind, rest) = ["CONST ", "PERS ", "VAR "]
        .iter()
        .find_map(|k| rest.strip_prefix(k).map(|r| (k.trim(), r)))?;
    let (lhs, rhs) = match rest.split_once(":=") {
        Some(x) => x,
        None if kind == "CONST" => return Some(Err(format!("a CONST without ':=': {l}"))),
        None => return None,
    };
    let mut words = lhs.split_whitespace();
    let (Some(ty), Some(name), None) = (words.next(), words.next(), words.next()) else {
        return Some(Err(format!("cannot read the {kind}: {l}")));
    };
    let Some(rhs) = rhs.trim().strip_suffix(';') else {
        return Some(Err(format!("a {kind} not ended by ';' on its line: {l}")));
    };
    let rhs = rhs.trim();
    let v = match ty {
        "num" => match rhs.parse::<f64>() {
            Ok(v) => Value::Num(v),
            Err(_) => return Some(Err(format!("{kind} num {name}: not a number: {rhs}"))),
        },
        "string" => match rhs.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(s) => Value::Str(s.to_string()),
            None => return Some(Err(format!("{kind} string {name}: not a string: {rhs}"))),
        },
        "jointtarget" => match parse_agg(rhs).and_then(|a| joint_target(&a)) {
            Ok(q) => Value::JointTarget(q),
            Err(e) => return Some(Err(format!("{kind} jointtarget {name}: {e}"))),
        },
        "egm_minmax" => match parse_agg(rhs).and_then(|a| a.nums::<2>("egm_minmax [min, max]")) {
            Ok(b) if b[0] <= b[1] => Value::MinMax(b),
            Ok(b) => {
                return Some(Err(format!(
                    "{kind} egm_minmax {name}: min {} above max {}",
                    b[0], b[1]
                )))
            }
            Err(e) => return Some(Err(format!("{kind} egm_minmax {name}: {e}"))),
        },
        "tooldata" => match parse_agg(rhs).and_then(|a| tool_data(name, &a)) {
            Ok(t) => Value::Tool(t),
            Err(e) => return Some(Err(format!("{kind} tooldata {name}: {e}"))),
        },
        _ => Value::Other(rhs.to_string()),
    };
    Some(Ok((name.to_string(), v)))
}

/// `[LOCAL] PROC name(` / `[LOCAL] FUNC type name(` / `[LOCAL] TRAP name` → (name, kind, LOCAL).
fn routine_start(line: &str) -> Option<(String, &'static str, bool)> {
    let (local, rest) = match line.strip_prefix("LOCAL ") {
        Some(r) => (true, r.trim_start()),
        None => (false, line),
    };
    let name_of = |r: &str| -> String {
        r.split(|c: char| c == '(' || c.is_whitespace())
            .next()
            .unwrap_or("")
            .to_string()
    };
    if let Some(r) = rest.strip_prefix("PROC ") {
        return Some((name_of(r.trim_start()), "PROC", local));
    }
    if let Some(r) = rest.strip_prefix("TRAP ") {
        return Some((name_of(r.trim_start()), "TRAP", local));
    }
    if let Some(r) = rest.strip_prefix("FUNC ") {
        let mut w = r.split_whitespace();
        let _ty = w.next();
        return Some((name_of(w.next().unwrap_or("")), "FUNC", local));
    }
    None
}

/// An instruction's arguments: positional ones (comma-separated, after the name) and optional
/// ones (`\Name` switches and `\Name:=value`).
#[derive(Debug, Default)]
struct Args {
    positional: Vec<String>,
    optional: BTreeMap<String, Option<String>>,
}

fn parse_args(rest: &str) -> Args {
    let mut a = Args::default();
    let rest = rest.trim().trim_end_matches(';');
    let mut parts = rest.split('\\');
    if let Some(first) = parts.next() {
        a.positional = first
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
    }
    for p in parts {
        let p = p.trim().trim_end_matches(',').trim();
        match p.split_once(":=") {
            Some((k, v)) => {
                a.optional
                    .insert(k.trim().to_string(), Some(v.trim().to_string()));
            }
            None => {
                // A switch; a positional argument may follow it after a comma.
                let mut it = p.splitn(2, ',');
                let k = it.next().unwrap_or("").trim().to_string();
                a.optional.insert(k, None);
                if let Some(more) = it.next() {
                    a.positional.extend(
                        more.split(',')
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty()),
                    );
                }
            }
        }
    }
    a
}

/// Reads the session's parameters from the RAPID module, and what the module does around it.
fn parse_rapid(text: &str) -> Result<(EgmSession, ModuleFacts), Vec<String>> {
    let mut errors = Vec::new();
    let mut consts: BTreeMap<String, Value> = BTreeMap::new();
    let mut instr: BTreeMap<&'static str, (usize, Args)> = BTreeMap::new();
    let mut wait: Option<(usize, String)> = None;
    let mut facts = ModuleFacts::default();
    let mut routine: Option<String> = None;
    let mut instr_routine: BTreeMap<&'static str, Option<String>> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if let Some((name, kind, local)) = routine_start(line) {
            if !local && facts.entry.is_none() && kind == "PROC" {
                facts.entry = Some(name.clone());
            }
            facts
                .routines
                .push((name.clone(), kind.to_string(), local, i + 1));
            routine = Some(name);
            continue;
        }
        if ["ENDPROC", "ENDFUNC", "ENDTRAP"].contains(&line) {
            routine = None;
            continue;
        }
        let here = routine.clone().unwrap_or_default();
        if let Some(rest) = line.strip_prefix("MoveAbsJ ") {
            let a = parse_args(rest);
            let target = a.positional.first().cloned().unwrap_or_default();
            let zone = a.positional.get(2).cloned().unwrap_or_default();
            facts.moves.push((i + 1, here.clone(), target, zone));
            continue;
        }
        if let Some(rest) = line.strip_prefix("WaitRob ") {
            if parse_args(rest).optional.contains_key("InPos") {
                facts.inpos_waits.push((i + 1, here.clone()));
            }
            continue;
        }
        if line == "RAISE;" || line.starts_with("RAISE ") {
            facts.raise_lines.push(i + 1);
            continue;
        }
        if line.replace(' ', "").starts_with("cell_egm_run:=TRUE") {
            facts.run_flag_set.push((i + 1, here.clone()));
            continue;
        }
        if let Some(c) = parse_const(line) {
            match c {
                Ok((n, v)) => {
                    consts.insert(n, v);
                }
                Err(e) => errors.push(format!("line {}: {e}", i + 1)),
            }
            continue;
        }
        for name in ["EGMSetupUC", "EGMActJoint", "EGMRunJoint"] {
            if let Some(rest) = line.strip_prefix(name) {
                if rest.starts_with(' ') {
                    if instr.contains_key(name) {
                        errors.push(format!(
                            "line {}: a second {name}: the simulator reads one",
                            i + 1
                        ));
                    }
                    instr.insert(name, (i + 1, parse_args(rest)));
                    instr_routine.insert(name, routine.clone());
                }
            }
        }
        if let Some(pos) = line.find("WaitTime ") {
            if wait.is_none() {
                let arg = line[pos + "WaitTime ".len()..]
                    .trim()
                    .trim_end_matches(';')
                    .trim();
                wait = Some((i + 1, arg.to_string()));
            }
        }
    }
    let num = |errors: &mut Vec<String>, what: &str, v: Option<&str>| -> f64 {
        let Some(v) = v else {
            errors.push(format!("{what}: missing"));
            return f64::NAN;
        };
        if let Ok(x) = v.parse::<f64>() {
            return x;
        }
        match consts.get(v) {
            Some(Value::Num(x)) => *x,
            Some(_) => {
                errors.push(format!("{what}: {v} is not a CONST num"));
                f64::NAN
            }
            None => {
                errors.push(format!("{what}: {v} is neither a number nor a CONST num"));
                f64::NAN
            }
        }
    };
    let string = |errors: &mut Vec<String>, what: &str, v: Option<&String>| -> String {
        let Some(v) = v else {
            errors.push(format!("{what}: missing"));
            return String::new();
        };
        if let Some(s) = v.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            return s.to_string();
        }
        match consts.get(v.as_str()) {
            Some(Value::Str(s)) => s.clone(),
            _ => {
                errors.push(format!(
                    "{what}: {v} is neither a string nor a CONST string"
                ));
                String::new()
            }
        }
    };
    let get = |errors: &mut Vec<String>, name: &'static str| -> Option<(usize, &Args)> {
        let r = instr.get(name).map(|(l, a)| (*l, a));
        if r.is_none() {
            errors.push(format!("no {name} instruction"));
        }
        r
    };
    let setup = get(&mut errors, "EGMSetupUC");
    let act = get(&mut errors, "EGMActJoint");
    let run = get(&mut errors, "EGMRunJoint");
    let (Some((ls, setup)), Some((la, act)), Some((lr, run))) = (setup, act, run) else {
        return Err(errors);
    };
    if !setup.optional.contains_key("Joint") {
        errors.push(format!(
            "line {ls}: EGMSetupUC without \\Joint: robot-io runs a joint session"
        ));
    }
    let comm_timeout_s = num(
        &mut errors,
        &format!("line {ls}: EGMSetupUC \\CommTimeout"),
        setup.optional.get("CommTimeout").and_then(|v| v.as_deref()),
    );
    let motion_data = string(
        &mut errors,
        &format!("line {ls}: EGMSetupUC's external-motion data (3rd argument)"),
        setup.positional.get(2),
    );
    let uc_device = string(
        &mut errors,
        &format!("line {ls}: EGMSetupUC's UDPUC device (4th argument)"),
        setup.positional.get(3),
    );
    let sample_rate_ms = num(
        &mut errors,
        &format!("line {la}: EGMActJoint \\SampleRate"),
        act.optional.get("SampleRate").and_then(|v| v.as_deref()),
    );
    let max_speed_deviation_deg_s = num(
        &mut errors,
        &format!("line {la}: EGMActJoint \\MaxSpeedDeviation"),
        act.optional
            .get("MaxSpeedDeviation")
            .and_then(|v| v.as_deref()),
    );
    for j in 1..=6 {
        if !run.optional.contains_key(&format!("J{j}")) {
            errors.push(format!(
                "line {lr}: EGMRunJoint without \\J{j}: every joint must be guided"
            ));
        }
    }
    let stop_mode = match run.positional.get(1).map(String::as_str) {
        Some("EGM_STOP_HOLD") => StopMode::Hold,
        Some("EGM_STOP_RAMP_DOWN") => StopMode::RampDown,
        other => {
            errors.push(format!(
                "line {lr}: EGMRunJoint's stop mode (2nd argument): {other:?} is not EGM_STOP_HOLD or EGM_STOP_RAMP_DOWN"
            ));
            StopMode::Hold
        }
    };
    let opt = |k: &str| run.optional.get(k).and_then(|v| v.as_deref());
    let cond_time_s = num(
        &mut errors,
        &format!("line {lr}: EGMRunJoint \\CondTime"),
        opt("CondTime"),
    );
    let ramp_in_s = num(
        &mut errors,
        &format!("line {lr}: EGMRunJoint \\RampInTime"),
        opt("RampInTime"),
    );
    let ramp_out_s = num(
        &mut errors,
        &format!("line {lr}: EGMRunJoint \\RampOutTime"),
        opt("RampOutTime"),
    );
    let pos_corr_gain = num(
        &mut errors,
        &format!("line {lr}: EGMRunJoint \\PosCorrGain"),
        opt("PosCorrGain"),
    );
    let restart_wait_s = match &wait {
        Some((l, a)) => num(
            &mut errors,
            &format!("line {l}: the restart WaitTime"),
            Some(a.as_str()),
        ),
        None => {
            errors.push("no WaitTime before a new session".into());
            f64::NAN
        }
    };
    facts.setup_routine = instr_routine.get("EGMSetupUC").cloned().flatten();
    facts.act_routine = instr_routine.get("EGMActJoint").cloned().flatten();
    facts.act_line = la;
    facts.tool_name = act.optional.get("Tool").cloned().flatten();
    // The convergence band: the egm_minmax every `\Jn` of EGMActJoint names (the emulator
    // reads one band; a module with different bands per joint gets the narrowest).
    for j in 1..=6 {
        if let Some(Some(n)) = act.optional.get(&format!("J{j}")) {
            if let Some(Value::MinMax(b)) = consts.get(n.as_str()) {
                let c = facts.cond_deg.get_or_insert(*b);
                c[0] = c[0].max(b[0]);
                c[1] = c[1].min(b[1]);
            }
        }
    }
    if let Some(n) = &facts.tool_name {
        if let Some(Value::Tool(t)) = consts.get(n) {
            facts.tool = Some(t.clone());
        }
    }
    facts.home = facts
        .moves
        .iter()
        .find(|(_, r, _, _)| Some(r) == facts.entry.as_ref())
        .and_then(|(_, _, t, _)| match consts.get(t) {
            Some(Value::JointTarget(q)) => Some(JointTarget {
                name: t.clone(),
                deg: *q,
            }),
            _ => None,
        });
    if errors.is_empty() {
        Ok((
            EgmSession {
                sample_rate_ms,
                comm_timeout_s,
                ramp_in_s,
                ramp_out_s,
                stop_mode,
                pos_corr_gain,
                max_speed_deviation_deg_s,
                cond_time_s,
                restart_wait_s,
                motion_data,
                uc_device,
            },
            facts,
        ))
    } else {
        Err(errors)
    }
}

/// The entries of one section of an ABB configuration file (`SECTION:` then entries of
/// `-Attribute value` pairs, an entry continued over lines ending in `\`; `#` lines are
/// comments). Each entry maps attribute → value ("" for a flag).
fn parse_cfg(text: &str, section: &str) -> Result<Vec<BTreeMap<String, String>>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.contains(":CFG_") => {}
        _ => return Err("the first line is not a configuration header (DOMAIN:CFG_…)".into()),
    }
    // Join continuations.
    let mut logical: Vec<String> = Vec::new();
    let mut cur = String::new();
    for l in lines {
        if l.trim_start().starts_with('#') {
            continue;
        }
        let t = l.trim_end();
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            logical.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        logical.push(cur);
    }
    let mut in_section = false;
    let mut found = false;
    let mut entries = Vec::new();
    for l in logical {
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('-') && t.ends_with(':') {
            in_section = &t[..t.len() - 1] == section;
            found |= in_section;
            continue;
        }
        if in_section {
            entries.push(parse_attrs(t)?);
        }
    }
    if !found {
        return Err(format!("no {section} section"));
    }
    Ok(entries)
}

fn parse_attrs(line: &str) -> Result<BTreeMap<String, String>, String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut in_str = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                in_str = !in_str;
                quoted = true;
            }
            c if c.is_whitespace() && !in_str => {
                if !cur.is_empty() || quoted {
                    tokens.push((std::mem::take(&mut cur), quoted));
                }
                quoted = false;
            }
            c => cur.push(c),
        }
    }
    if in_str {
        return Err(format!("an unterminated string in: {line}"));
    }
    if !cur.is_empty() || quoted {
        tokens.push((cur, quoted));
    }
    let is_key = |(t, q): &(String, bool)| {
        !q && t.starts_with('-') && t[1..].starts_with(|c: char| c.is_ascii_alphabetic())
    };
    let mut map = BTreeMap::new();
    let mut i = 0;
    while i < tokens.len() {
        if !is_key(&tokens[i]) {
            return Err(format!(
                "expected -Attribute, found {:?} in: {line}",
                tokens[i].0
            ));
        }
        let key = tokens[i].0[1..].to_string();
        if i + 1 < tokens.len() && !is_key(&tokens[i + 1]) {
            map.insert(key, tokens[i + 1].0.clone());
            i += 2;
        } else {
            map.insert(key, String::new());
            i += 1;
        }
    }
    Ok(map)
}

fn udp_device(d: &BTreeMap<String, String>) -> Result<UdpUcDevice, String> {
    let name = d.get("Name").cloned().unwrap_or_default();
    if d.get("Type").map(String::as_str) != Some("UDPUC") {
        return Err(format!(
            "COM_TRP \"{name}\": -Type {:?}, EGM needs \"UDPUC\"",
            d.get("Type")
        ));
    }
    let remote_address = d
        .get("RemoteAdress")
        .or_else(|| d.get("RemoteAddress"))
        .cloned()
        .ok_or_else(|| format!("COM_TRP \"{name}\": no -RemoteAdress (the PC's address)"))?;
    if remote_address.parse::<std::net::IpAddr>().is_err() {
        return Err(format!(
            "COM_TRP \"{name}\": -RemoteAdress {remote_address:?} is not an IP address"
        ));
    }
    let port = |k: &str, required: bool| -> Result<u16, String> {
        match d.get(k) {
            Some(v) => v
                .parse::<u16>()
                .map_err(|_| format!("COM_TRP \"{name}\": -{k} {v:?} is not a port")),
            None if required => Err(format!("COM_TRP \"{name}\": no -{k}")),
            None => Ok(0),
        }
    };
    let remote_port = port("RemotePortNumber", true)?;
    let local_port = port("LocalPortNumber", false)?;
    Ok(UdpUcDevice {
        name,
        remote_address,
        remote_port,
        local_port,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_shipped_files_parse_to_the_documented_session() {
        let s = Irc5Egm::builtin().unwrap();
        assert_eq!(s.session.sample_rate_ms, 4.0);
        assert_eq!(s.session.comm_timeout_s, 0.2);
        assert_eq!(s.session.ramp_in_s, 0.1);
        assert_eq!(s.session.ramp_out_s, 0.1);
        assert_eq!(s.session.stop_mode, StopMode::Hold);
        assert_eq!(s.session.pos_corr_gain, 1.0);
        assert_eq!(s.session.restart_wait_s, 1.0);
        assert_eq!(s.session.max_speed_deviation_deg_s, 250.0);
        assert_eq!(s.session.uc_device, "CellEgm");
        let m = &s.module;
        assert_eq!(m.entry.as_deref(), Some("CellEgmRun"));
        assert_eq!(m.setup_routine.as_deref(), Some("CellEgmSession"));
        assert_eq!(m.act_routine.as_deref(), Some("CellEgmSession"));
        assert_eq!(
            m.home,
            Some(JointTarget {
                name: "cell_home".into(),
                deg: [0.0, 0.0, 0.0, 0.0, 30.0, 0.0]
            })
        );
        let tool = m.tool.as_ref().unwrap();
        assert_eq!(m.tool_name.as_deref(), Some("cell_tool"));
        assert_eq!((tool.mass_kg, tool.cog_mm), (0.5, [0.0, 0.0, 40.0]));
        assert_eq!(
            (tool.tframe_mm, tool.tframe_q),
            ([0.0; 3], [1.0, 0.0, 0.0, 0.0])
        );
        assert_eq!(
            s.lint(IRB120_SLOWEST_AXIS_DEG_S),
            Vec::<String>::new(),
            "the shipped module follows ABB's rules"
        );
        assert_eq!(s.device.remote_port, 6510);
        assert_eq!(s.device.remote_address, "192.168.10.1");
        assert_eq!(s.device.local_port, 0);
        assert_eq!(s.motion_data.get("ext_motion_level").unwrap(), "0");
        assert_eq!(
            s.motion_data
                .get("do_not_restart_after_motors_off")
                .unwrap(),
            ""
        );
    }

    fn edit(text: &str, from: &str, to: &str) -> String {
        assert!(text.contains(from), "{from}");
        text.replacen(from, to, 1)
    }

    fn errs(rapid: &str, sio: &str, moc: &str) -> String {
        Irc5Egm::parse(rapid, sio, moc).unwrap_err().join("\n")
    }

    #[test]
    fn every_changed_value_is_read_or_named() {
        // A value changed in the file is the value read.
        let r = edit(
            BUILTIN_RAPID,
            "EGM_COMM_TIMEOUT_S := 0.2;",
            "EGM_COMM_TIMEOUT_S := 0.5;",
        );
        let s = Irc5Egm::parse(&r, BUILTIN_SIO, BUILTIN_MOC).unwrap();
        assert_eq!(s.session.comm_timeout_s, 0.5);
        let r = edit(
            BUILTIN_RAPID,
            "\\SampleRate:=EGM_SAMPLE_RATE_MS",
            "\\SampleRate:=8",
        );
        assert_eq!(
            Irc5Egm::parse(&r, BUILTIN_SIO, BUILTIN_MOC)
                .unwrap()
                .session
                .sample_rate_ms,
            8.0
        );
        let sio = edit(
            BUILTIN_SIO,
            "-RemotePortNumber 6510",
            "-RemotePortNumber 6511",
        );
        assert_eq!(
            Irc5Egm::parse(BUILTIN_RAPID, &sio, BUILTIN_MOC)
                .unwrap()
                .device
                .remote_port,
            6511
        );
        // Values the cell cannot run with, each named.
        let r = edit(
            BUILTIN_RAPID,
            "EGM_SAMPLE_RATE_MS := 4;",
            "EGM_SAMPLE_RATE_MS := 6;",
        );
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("\\SampleRate 6 ms"));
        let r = edit(
            BUILTIN_RAPID,
            "egm_id, EGM_STOP_HOLD \\J1",
            "egm_id, EGM_STOP_RAMP_DOWN \\J1",
        );
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("EGM_STOP_HOLD"));
        let r = edit(
            BUILTIN_RAPID,
            "EGM_POS_CORR_GAIN := 1;",
            "EGM_POS_CORR_GAIN := 0;",
        );
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("\\PosCorrGain 0"));
        let r = edit(BUILTIN_RAPID, " \\CommTimeout:=EGM_COMM_TIMEOUT_S", "");
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("\\CommTimeout: missing"));
        let r = edit(BUILTIN_RAPID, " \\J6 \\CondTime", " \\CondTime");
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("without \\J6"));
        let r = edit(
            BUILTIN_RAPID,
            "EGM_UC_DEVICE := \"CellEgm\"",
            "EGM_UC_DEVICE := \"Other\"",
        );
        assert!(errs(&r, BUILTIN_SIO, BUILTIN_MOC).contains("no COM_TRP entry -Name \"Other\""));
        let moc = edit(BUILTIN_MOC, "-name \"CellEgm\"", "-name \"default\"");
        assert!(errs(BUILTIN_RAPID, BUILTIN_SIO, &moc).contains("no EXT_MOTION_DATA entry"));
        let sio = edit(BUILTIN_SIO, "\"UDPUC\"", "\"TCP\"");
        assert!(errs(BUILTIN_RAPID, &sio, BUILTIN_MOC).contains("UDPUC"));
        let sio = edit(BUILTIN_SIO, "\"192.168.10.1\"", "\"pc.local\"");
        assert!(errs(BUILTIN_RAPID, &sio, BUILTIN_MOC).contains("not an IP address"));
        // Several problems at once are all listed.
        let r = edit(
            BUILTIN_RAPID,
            "EGM_RAMP_IN_S := 0.1;",
            "EGM_RAMP_IN_S := -1;",
        );
        let r = edit(&r, "EGM_POS_CORR_GAIN := 1;", "EGM_POS_CORR_GAIN := 2;");
        let e = errs(&r, BUILTIN_SIO, BUILTIN_MOC);
        assert!(
            e.contains("\\RampInTime -1") && e.contains("\\PosCorrGain 2"),
            "{e}"
        );
    }

    #[test]
    fn a_written_tool_load_reads_back_and_changes_nothing_else() {
        let out = with_tool_load(BUILTIN_RAPID, "cell_tool", 0.812, [1.5, -2.0, 63.25]).unwrap();
        let i = Irc5Egm::parse(&out, BUILTIN_SIO, BUILTIN_MOC).unwrap();
        let t = i.module.tool.as_ref().unwrap();
        assert_eq!(t.mass_kg, 0.812);
        assert_eq!(t.cog_mm, [1.5, -2.0, 63.25]);
        assert_eq!(t.inertia_kg_m2, [0.0; 3]);
        assert_eq!(t.tframe_mm, [0.0; 3]);
        let before = Irc5Egm::builtin().unwrap();
        assert_eq!(i.session, before.session);
        let changed: Vec<_> = BUILTIN_RAPID
            .lines()
            .zip(out.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(BUILTIN_RAPID.lines().count(), out.lines().count());
        assert!(with_tool_load(BUILTIN_RAPID, "nope", 1.0, [0.0; 3]).is_err());
        assert!(with_tool_load(BUILTIN_RAPID, "cell_tool", f64::NAN, [0.0; 3]).is_err());
        assert!(with_tool_load(BUILTIN_RAPID, "cell_tool", 0.0, [0.0; 3]).is_err());
    }

    fn sim_side() -> CellEgmSide {
        CellEgmSide {
            config: "sim.toml".into(),
            bind: "127.0.0.1:6510".parse().unwrap(),
            command_timeout_ms: 8.0,
            silence_timeout_ms: 50.0,
            sim: Some((4.0, "127.0.0.1:6510".parse().unwrap())),
            real: false,
            max_joint_speed_deg_s: 250.0,
            controller: Some(("127.0.0.1".parse().unwrap(), Some(6511))),
            sim_controller_bind: Some("127.0.0.1:6511".parse().unwrap()),
        }
    }

    #[test]
    fn a_config_that_disagrees_with_the_irc5_side_is_named() {
        let i = Irc5Egm::builtin().unwrap();
        assert_eq!(i.disagreements(&sim_side()), Vec::<String>::new());
        let real = CellEgmSide {
            config: "real.toml".into(),
            bind: "192.168.10.1:6510".parse().unwrap(),
            sim: None,
            real: true,
            controller: Some(("192.168.10.20".parse().unwrap(), None)),
            sim_controller_bind: None,
            ..sim_side()
        };
        assert_eq!(i.disagreements(&real), Vec::<String>::new());
        let one = |c: CellEgmSide, what: &str| {
            let e = i.disagreements(&c);
            assert_eq!(e.len(), 1, "{e:?}");
            assert!(e[0].contains(what), "{e:?}");
        };
        one(
            CellEgmSide {
                bind: "127.0.0.1:6511".parse().unwrap(),
                sim: Some((4.0, "127.0.0.1:6511".parse().unwrap())),
                ..sim_side()
            },
            "port 6511",
        );
        one(
            CellEgmSide {
                bind: "192.168.10.5:6510".parse().unwrap(),
                ..real.clone()
            },
            "address 192.168.10.5",
        );
        one(
            CellEgmSide {
                bind: "0.0.0.0:6510".parse().unwrap(),
                ..real.clone()
            },
            "name the PC's address",
        );
        one(
            CellEgmSide {
                sim: Some((2.0, "127.0.0.1:6510".parse().unwrap())),
                ..sim_side()
            },
            "cycle_ms 2",
        );
        one(
            CellEgmSide {
                sim: Some((4.0, "127.0.0.1:6600".parse().unwrap())),
                ..sim_side()
            },
            "sim.egm.robot_io",
        );
        one(
            CellEgmSide {
                controller: None,
                ..real.clone()
            },
            "controller unset",
        );
        one(
            CellEgmSide {
                controller: None,
                ..sim_side()
            },
            "controller unset",
        );
        one(
            CellEgmSide {
                controller: Some(("192.168.10.20".parse().unwrap(), Some(6511))),
                ..real.clone()
            },
            "-LocalPortNumber 0 lets the controller pick",
        );
        one(
            CellEgmSide {
                controller: Some(("127.0.0.1".parse().unwrap(), Some(6600))),
                ..sim_side()
            },
            "does not admit the simulated IRC5",
        );
        one(
            CellEgmSide {
                controller: Some(("127.0.0.2".parse().unwrap(), None)),
                ..sim_side()
            },
            "does not admit the simulated IRC5",
        );
        one(
            CellEgmSide {
                command_timeout_ms: 3.0,
                ..sim_side()
            },
            "command_timeout_ms 3",
        );
        one(
            CellEgmSide {
                silence_timeout_ms: 6.0,
                ..sim_side()
            },
            "silence_timeout_ms 6",
        );
        one(
            CellEgmSide {
                silence_timeout_ms: 250.0,
                ..sim_side()
            },
            "CommTimeout 200 ms",
        );
        // The IRC5 side changed instead: the same checks catch it.
        let sio = edit(
            BUILTIN_SIO,
            "-RemotePortNumber 6510",
            "-RemotePortNumber 6520",
        );
        let moved = Irc5Egm::parse(BUILTIN_RAPID, &sio, BUILTIN_MOC).unwrap();
        assert_eq!(moved.disagreements(&sim_side()).len(), 1);
        assert_eq!(moved.disagreements(&real).len(), 1);
        let r = edit(
            BUILTIN_RAPID,
            "EGM_SAMPLE_RATE_MS := 4;",
            "EGM_SAMPLE_RATE_MS := 8;",
        );
        let slower = Irc5Egm::parse(&r, BUILTIN_SIO, BUILTIN_MOC).unwrap();
        let e = slower.disagreements(&sim_side());
        assert!(e.iter().any(|x| x.contains("\\SampleRate 8")), "{e:?}");
    }

    /// The module as shipped before issue 43 (its session routine and declarations, shortened):
    /// every rule it broke is named.
    const BEFORE_ISSUE_43: &str = r#"MODULE CellEgm
    LOCAL CONST num EGM_SAMPLE_RATE_MS := 4;
    LOCAL CONST num EGM_COMM_TIMEOUT_S := 0.2;
    LOCAL CONST num EGM_RAMP_IN_S := 0.1;
    LOCAL CONST num EGM_RAMP_OUT_S := 0.1;
    LOCAL CONST egm_minmax EGM_COND := [-0.1, 0.1];
    LOCAL CONST num EGM_COND_TIME_S := 1000000;
    LOCAL CONST num EGM_POS_CORR_GAIN := 1;
    LOCAL CONST num EGM_MAX_SPEED_DEV_DEG_S := 420;
    LOCAL CONST num EGM_RESTART_WAIT_S := 1;
    LOCAL CONST string EGM_UC_DEVICE := "CellEgm";
    LOCAL CONST string EGM_MOTION_DATA := "CellEgm";
    PERS bool cell_egm_run := TRUE;
    LOCAL VAR egmident egm_id;
    PROC main()
        EGMReset egm_id;
        EGMGetId egm_id;
        EGMSetupUC ROB_1, egm_id, EGM_MOTION_DATA, EGM_UC_DEVICE \Joint \CommTimeout:=EGM_COMM_TIMEOUT_S;
        WHILE cell_egm_run DO
            RunSession;
            IF cell_egm_run WaitTime EGM_RESTART_WAIT_S;
        ENDWHILE
    ENDPROC
    LOCAL PROC RunSession()
        EGMActJoint egm_id \Tool:=tool0 \J1:=EGM_COND \J2:=EGM_COND \J3:=EGM_COND \J4:=EGM_COND \J5:=EGM_COND \J6:=EGM_COND \SampleRate:=EGM_SAMPLE_RATE_MS \MaxSpeedDeviation:=EGM_MAX_SPEED_DEV_DEG_S;
        EGMRunJoint egm_id, EGM_STOP_HOLD \J1 \J2 \J3 \J4 \J5 \J6 \CondTime:=EGM_COND_TIME_S \RampInTime:=EGM_RAMP_IN_S \RampOutTime:=EGM_RAMP_OUT_S \PosCorrGain:=EGM_POS_CORR_GAIN;
    ERROR
        IF ERRNO = ERR_UDPUC_COMM THEN
            RETURN;
        ENDIF
        RAISE;
    ENDPROC
ENDMODULE
"#;

    #[test]
    fn the_module_shipped_before_breaks_every_rule_and_each_is_named() {
        let s = Irc5Egm::parse(BEFORE_ISSUE_43, BUILTIN_SIO, BUILTIN_MOC).unwrap();
        let l = s.lint(IRB120_SLOWEST_AXIS_DEG_S).join("\n");
        for want in [
            "named main",
            "no MoveAbsJ … fine before EGMActJoint (line 25)",
            "no WaitRob \\InPos",
            "does not start with a MoveAbsJ to a taught jointtarget",
            "\\Tool:=tool0: no load",
            "\\MaxSpeedDeviation 420 deg/s is above the slowest axis's maximum speed (250 deg/s)",
            "EGMSetupUC runs in main and EGMActJoint in RunSession",
            "line 31: RAISE",
            "never sets cell_egm_run := TRUE",
        ] {
            assert!(l.contains(want), "{want:?} not in:\n{l}");
        }
        assert_eq!(s.lint(IRB120_SLOWEST_AXIS_DEG_S).len(), 9, "{l}");
    }

    #[test]
    fn each_rule_is_named_alone_on_the_shipped_module() {
        let one = |from: &str, to: &str, want: &str| {
            let r = edit(BUILTIN_RAPID, from, to);
            let s = Irc5Egm::parse(&r, BUILTIN_SIO, BUILTIN_MOC).unwrap();
            let l = s.lint(IRB120_SLOWEST_AXIS_DEG_S);
            assert_eq!(l.len(), 1, "{from} → {to}: {l:?}");
            assert!(l[0].contains(want), "{want:?} not in {l:?}");
        };
        one("        WaitRob \\InPos;\n", "", "no WaitRob \\InPos");
        one(
            "MoveAbsJ cell_home, CELL_HOME_SPEED, fine, cell_tool;",
            "MoveAbsJ cell_home, CELL_HOME_SPEED, z50, cell_tool;",
            "ends in zone z50",
        );
        one(
            "        MoveAbsJ cell_home, CELL_HOME_SPEED, fine, cell_tool;\n",
            "",
            "taught jointtarget",
        );
        one("PROC CellEgmRun()", "PROC main()", "named main");
        one(
            "EGM_MAX_SPEED_DEV_DEG_S := 250;",
            "EGM_MAX_SPEED_DEV_DEG_S := 420;",
            "420 deg/s",
        );
        one(
            "        cell_egm_run := TRUE;\n",
            "",
            "never sets cell_egm_run := TRUE",
        );
        one(
            "        RETURN FALSE;\n",
            "        RAISE;\n",
            "RAISE passes",
        );
        one(
            "[0.5, [0, 0, 40], [1, 0, 0, 0], 0.000529",
            "[0, [0, 0, 40], [1, 0, 0, 0], 0.000529",
            "load 0 kg",
        );
        one(
            "\\Tool:=cell_tool",
            "\\Tool:=tool0",
            "no load while the arm carries",
        );
        // A slower arm's own bound is used when given.
        let s = Irc5Egm::builtin().unwrap();
        assert_eq!(s.lint(200.0).len(), 1);
    }

    #[test]
    fn a_broken_jointtarget_or_tooldata_is_named_with_its_line() {
        let r = edit(
            BUILTIN_RAPID,
            "[[0, 0, 0, 0, 30, 0], [9E9",
            "[[0, 0, 0, 30, 0], [9E9",
        );
        let e = errs(&r, BUILTIN_SIO, BUILTIN_MOC);
        assert!(
            e.contains("jointtarget cell_home") && e.contains("a list of 6"),
            "{e}"
        );
        let r = edit(BUILTIN_RAPID, "[TRUE, [[0, 0, 0]", "[YES, [[0, 0, 0]");
        let e = errs(&r, BUILTIN_SIO, BUILTIN_MOC);
        assert!(
            e.contains("tooldata cell_tool") && e.contains("TRUE or FALSE"),
            "{e}"
        );
        let r = edit(BUILTIN_RAPID, "[0.5, [0, 0, 40]", "[0.5, [0, 0, 40]]");
        let e = errs(&r, BUILTIN_SIO, BUILTIN_MOC);
        assert!(e.contains("tooldata cell_tool"), "{e}");
        assert!(e.starts_with("CellEgm.mod: line "), "{e}");
    }

    #[test]
    fn comments_strings_and_continuations() {
        assert_eq!(strip_comment("  x := 1; ! note"), "  x := 1; ");
        assert_eq!(strip_comment("TPWrite \"a!b\"; ! c"), "TPWrite \"a!b\"; ");
        let cfg = "SIO:CFG_1.0:6:1::\n#\n# -Name \"ignored\"\nCOM_TRP:\n\n  -Name \"A\" -Type \"UDPUC\"\\\n  -RemoteAdress \"10.0.0.2\" -RemotePortNumber 7000\n  -Name \"B\" -Type \"UDPUC\" -RemoteAdress \"10.0.0.3\" -RemotePortNumber 7001\n";
        let e = parse_cfg(cfg, "COM_TRP").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].get("RemotePortNumber").unwrap(), "7000");
        assert_eq!(e[1].get("Name").unwrap(), "B");
        assert!(parse_cfg(cfg, "EXT_MOTION_DATA").is_err());
        assert!(parse_cfg("COM_TRP:\n", "COM_TRP").is_err());
        assert!(parse_attrs("-Name \"unterminated").is_err());
        assert!(parse_attrs("Name \"x\"").is_err());
    }

    #[test]
    fn a_directory_is_read_like_the_builtin() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/irc5");
        assert_eq!(
            Irc5Egm::load_dir(&dir).unwrap(),
            Irc5Egm::builtin().unwrap()
        );
        let e = Irc5Egm::load_dir(Path::new("/nonexistent")).unwrap_err();
        assert!(e[0].contains("cannot read"), "{e:?}");
    }
}
