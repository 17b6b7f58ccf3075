//! `[robot_io]` table.

use common::config::{check_range, ConfigErrors, Validate};
use serde::{Deserialize, Serialize};

/// Which robot robot-io talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// In-process ideal robot: applies each reference exactly, at `cycle_ms`. For tests and
    /// for running the cell's data flow without a simulator.
    #[default]
    Ideal,
    /// ABB Externally Guided Motion over UDP (a real IRC5 or the simulator's controller
    /// emulator): see `[robot_io.egm]`.
    Egm,
}

/// `[robot_io.egm]`: the EGM driver (used when `driver = "egm"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgmConfig {
    /// UDP address robot-io binds; the controller's *Remote Address* / *Remote Port Number*
    /// (UDPUC transmission protocol entry) must point here. Replies go to the sender of each
    /// datagram the pin admits. Never an unspecified address (`0.0.0.0`): name the interface
    /// on the controller's network.
    pub bind: String,
    /// The EGM controller: `ip` or `ip:port` (`egm::peer::PeerPin`). Only its datagrams are
    /// answered, published and allowed to drive the session and the supervisor; anyone else's
    /// are dropped first and counted (`egm.strangers`). Unset: every sender is answered
    /// (robot-io warns at start; `cell commission` fails it). A real IRC5 picks its source
    /// port (SIO `-LocalPortNumber 0`): pin its address only.
    pub controller: Option<String>,
    /// No `EgmRobot` for this long → the robot is silent: nothing new is published and the
    /// safety state says `RobotSilent` (ms).
    pub silence_timeout_ms: f64,
    /// Also send `speedRef.joints` (deg/s, the reference's own velocity; 0 while holding).
    /// Off by default: after silence a real IRC5 keeps applying the last `speedRef` until
    /// `\CommTimeout` (reference/protocols.md §1.8), so a frozen PC would leave the arm moving
    /// for up to the timeout plus the ramp-out (0.2 s + 0.1 s with the shipped module) instead
    /// of holding. On, a real controller gets a velocity feed-forward (the simulator's lag
    /// model has none): measure the lag (`cell commission`) before turning it on.
    pub send_speed_ref: bool,
    /// No joint's reference moves faster than this (deg/s; the arm's own speed limits apply
    /// too). It must stay below the controller's `\MaxSpeedDeviation` (CellEgm.mod, 250 = the
    /// IRB 120's slowest axis), beyond which a real IRC5 ends the session with an EGM error;
    /// `cell commission` fails a cap above it. 200 leaves a margin: robot-io limits on the
    /// controller's clock per datagram, the controller checks per cycle, and replies that
    /// bunch after a late cycle step further in one (measured on the emulated IRC5: 282 °/s in
    /// one cycle with robot-io at 250).
    pub max_joint_speed_deg_s: f64,
}

impl EgmConfig {
    /// The joint speed limits robot-io holds its reference to (rad/s): the arm's, capped at
    /// [`EgmConfig::max_joint_speed_deg_s`].
    pub fn capped_speeds(&self, arm_rad_s: [f64; 6]) -> [f64; 6] {
        let cap = self.max_joint_speed_deg_s.to_radians();
        arm_rad_s.map(|v| v.min(cap))
    }
}

impl Default for EgmConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:6510".into(),
            controller: None,
            silence_timeout_ms: 50.0,
            send_speed_ref: false,
            max_joint_speed_deg_s: 200.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RobotIoConfig {
    pub driver: DriverKind,
    /// Robot cycle (ms): the ideal driver's period; for EGM the nominal controller cycle
    /// (its `\SampleRate`, 4 ms on an IRC5), used when the controller's clock gives no step
    /// time.
    pub cycle_ms: f64,
    /// A joint command older than this (by its local arrival time) is stale → hold (ms). A
    /// fixed time, not a cycle count: the default 8 ms is 2 cycles of the 4 ms EGM cycle; it
    /// must be at least one `cycle_ms` (checked at start-up).
    pub command_timeout_ms: f64,
    /// Start position of the ideal robot (deg).
    pub initial_q_deg: [f64; 6],
    /// Joint acceleration limit of the outgoing reference (deg/s²). Unset: for `egm` the IRB 120
    /// choice of [`crate::supervisor::irb120_max_accel`] (1000, 1000, 1000, 1280, 1280,
    /// 1680 — the data-sheet speed reached in 0.25 s); for `ideal` none (speed and position
    /// limits only, the ideal robot's behaviour is unchanged).
    pub max_accel_deg_s2: Option<[f64; 6]>,
    /// A joint measured further than this outside its position limits raises a protective
    /// stop `MeasuredOutOfLimits` (deg).
    pub measured_limit_margin_deg: f64,
    /// Departure ramp after a hold that stopped a moving reference, or after an e-stop or
    /// protective stop (ms of robot time): the next motion's reference leaves with its
    /// acceleration rising from 0 to the limit over this time (bounded jerk). 0: none.
    pub resume_ramp_ms: f64,
    /// A protective end on a force, a torque, an impact, a saturated sensor or a collision
    /// holds at the joints measured this long before (ms of robot time; 0: the newest), back
    /// along the path the arm has just travelled (`supervisor::SupervisorParams::
    /// protective_retrace_s`). At most 31 cycles.
    pub protective_retrace_ms: f64,
    /// A command stream that goes stale while the reference moves brakes from the last
    /// reference (no step back to the lagging arm) unless the force service's fresh contact
    /// force is at least this (N): then it holds at the measured joints, as every stale hold
    /// at rest does (`supervisor::SupervisorParams::stale_contact_n`).
    pub stale_contact_n: f64,
    /// `[robot_io.clamp_release]`: after a task's unlatched protective end on its force or
    /// torque limit, a force still above `release_force_n` (the force service's estimate) is
    /// released by moving the held TCP along it, slowly and within a travel bound
    /// ([`crate::clamp`]); a latched stop holds still until reset.
    pub clamp_release: crate::clamp::ClampParams,
    /// Where the e-stop and protective-stop latches are persisted so that they survive a
    /// crash and restart of robot-io (small JSON file, written atomically by rename). Empty:
    /// `<temp dir>/cell-<cell id>/robot-io-latch.json` (on a systemd host point it at
    /// `/run/cell/…`: cleared at boot). `cell up` deletes it when it starts the cell
    /// deliberately; the launcher's restarts of a crashed robot-io keep it.
    pub latch_file: String,
    pub egm: EgmConfig,
    /// Real-time placement of robot-io's node thread (`[robot_io.rt]`): the whole event loop —
    /// the datagram loop with its supervisor, on one thread with a single-threaded runtime,
    /// pinned, `SCHED_FIFO`, memory locked as configured; without the privilege one warning
    /// and unpinned operation (or a start-up failure with `required = true`).
    pub rt: common::service::RtConfig,
}

impl Default for RobotIoConfig {
    fn default() -> Self {
        Self {
            driver: DriverKind::Ideal,
            cycle_ms: 4.0,
            command_timeout_ms: 8.0,
            initial_q_deg: [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
            max_accel_deg_s2: None,
            measured_limit_margin_deg: 0.5,
            resume_ramp_ms: crate::supervisor::DEFAULT_RESUME_RAMP_S * 1e3,
            protective_retrace_ms: crate::supervisor::DEFAULT_PROTECTIVE_RETRACE_S * 1e3,
            stale_contact_n: crate::supervisor::DEFAULT_STALE_CONTACT_N,
            clamp_release: crate::clamp::ClampParams::default(),
            latch_file: String::new(),
            egm: EgmConfig::default(),
            rt: common::service::RtConfig::default(),
        }
    }
}

impl Validate for RobotIoConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        self.rt.validate(&format!("{prefix}.rt"), errors);
        check_range(
            errors,
            format!("{prefix}.cycle_ms"),
            self.cycle_ms,
            0.5,
            100.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.command_timeout_ms"),
            self.command_timeout_ms,
            1.0,
            1000.0,
            "ms",
        );
        if self.command_timeout_ms.is_finite()
            && self.cycle_ms.is_finite()
            && self.command_timeout_ms < self.cycle_ms
        {
            errors.push(
                format!("{prefix}.command_timeout_ms"),
                format!(
                    "{} ms is shorter than one robot cycle ({prefix}.cycle_ms = {} ms): every command would be stale",
                    self.command_timeout_ms, self.cycle_ms
                ),
            );
        }
        check_range(
            errors,
            format!("{prefix}.measured_limit_margin_deg"),
            self.measured_limit_margin_deg,
            0.0,
            10.0,
            "deg",
        );
        check_range(
            errors,
            format!("{prefix}.resume_ramp_ms"),
            self.resume_ramp_ms,
            0.0,
            1000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.protective_retrace_ms"),
            self.protective_retrace_ms,
            0.0,
            (crate::supervisor::RETRACE_RING - 1) as f64 * self.cycle_ms,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.stale_contact_n"),
            self.stale_contact_n,
            0.0,
            1000.0,
            "N",
        );
        for (k, why) in self.clamp_release.problems() {
            errors.push(format!("{prefix}.clamp_release.{k}"), why);
        }
        for (j, v) in self.initial_q_deg.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.initial_q_deg[{j}]"),
                *v,
                -400.0,
                400.0,
                "deg",
            );
        }
        for (j, v) in self.max_accel_deg_s2.iter().flatten().enumerate() {
            check_range(
                errors,
                format!("{prefix}.max_accel_deg_s2[{j}]"),
                *v,
                1.0,
                100_000.0,
                "deg/s²",
            );
        }
        self.egm.validate_with(prefix, self.cycle_ms, errors);
        if self.driver == DriverKind::Egm {
            if let Ok(a) = self.egm.bind_addr() {
                if a.ip().is_unspecified() {
                    errors.push(
                        format!("{prefix}.egm.bind"),
                        format!(
                            "{a}: an unspecified address listens on every interface (on a cell PC also the office network's): name the PC's address on the controller's network"
                        ),
                    );
                }
            }
        }
    }
}

impl RobotIoConfig {
    /// The latch file of cell `cell_id` (see `latch_file`).
    pub fn latch_path(&self, cell_id: &str) -> std::path::PathBuf {
        if self.latch_file.is_empty() {
            std::env::temp_dir()
                .join(format!("cell-{cell_id}"))
                .join("robot-io-latch.json")
        } else {
            common::config::resolve_path(&self.latch_file)
        }
    }

    /// Joint acceleration limits (rad/s²; infinite = none), defaults resolved per driver.
    pub fn max_accel_rad_s2(&self) -> [f64; 6] {
        match (self.max_accel_deg_s2, self.driver) {
            (Some(a), _) => a.map(f64::to_radians),
            (None, DriverKind::Egm) => crate::supervisor::irb120_max_accel(),
            (None, DriverKind::Ideal) => [f64::INFINITY; 6],
        }
    }
}

impl EgmConfig {
    /// The bind address, parsed.
    pub fn bind_addr(&self) -> Result<std::net::SocketAddr, String> {
        self.bind
            .parse()
            .map_err(|e| format!("{:?} is not an IP:port like 0.0.0.0:6510 ({e})", self.bind))
    }

    /// The pinned controller, parsed (`None`: unpinned).
    pub fn controller_pin(&self) -> Result<Option<egm::peer::PeerPin>, String> {
        self.controller
            .as_deref()
            .map(egm::peer::PeerPin::parse)
            .transpose()
    }

    fn validate_with(&self, prefix: &str, cycle_ms: f64, errors: &mut ConfigErrors) {
        if let Err(e) = self.bind_addr() {
            errors.push(format!("{prefix}.egm.bind"), e);
        }
        if let Err(e) = self.controller_pin() {
            errors.push(format!("{prefix}.egm.controller"), e);
        }
        check_range(
            errors,
            format!("{prefix}.egm.silence_timeout_ms"),
            self.silence_timeout_ms,
            2.0,
            10_000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.egm.max_joint_speed_deg_s"),
            self.max_joint_speed_deg_s,
            1.0,
            1000.0,
            "deg/s",
        );
        if self.silence_timeout_ms.is_finite()
            && cycle_ms.is_finite()
            && self.silence_timeout_ms < 2.0 * cycle_ms
        {
            errors.push(
                format!("{prefix}.egm.silence_timeout_ms"),
                format!(
                    "{} ms is shorter than 2 robot cycles ({prefix}.cycle_ms = {cycle_ms} ms)",
                    self.silence_timeout_ms
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(c: &RobotIoConfig) -> String {
        let mut e = ConfigErrors::default();
        c.validate("robot_io", &mut e);
        if e.is_empty() {
            String::new()
        } else {
            e.to_string()
        }
    }

    fn egm(bind: &str, controller: Option<&str>) -> RobotIoConfig {
        RobotIoConfig {
            driver: DriverKind::Egm,
            egm: EgmConfig {
                bind: bind.into(),
                controller: controller.map(str::to_string),
                ..EgmConfig::default()
            },
            ..RobotIoConfig::default()
        }
    }

    #[test]
    fn an_unspecified_egm_bind_is_refused() {
        assert_eq!(problems(&egm("127.0.0.1:6510", Some("127.0.0.1:6511"))), "");
        let p = problems(&egm("0.0.0.0:6510", Some("127.0.0.1")));
        assert!(
            p.contains("robot_io.egm.bind") && p.contains("every interface"),
            "{p}"
        );
        let p = problems(&egm("[::]:6510", Some("127.0.0.1")));
        assert!(p.contains("every interface"), "{p}");
        // The ideal driver binds nothing: its (unused) EGM address is not judged.
        let ideal = RobotIoConfig {
            driver: DriverKind::Ideal,
            ..egm("0.0.0.0:6510", None)
        };
        assert_eq!(problems(&ideal), "");
        assert_eq!(EgmConfig::default().bind, "127.0.0.1:6510");
    }

    #[test]
    fn a_bad_controller_pin_is_refused_with_the_key() {
        for bad in ["0.0.0.0", "irc5", "127.0.0.1:0"] {
            let p = problems(&egm("127.0.0.1:6510", Some(bad)));
            assert!(p.contains("robot_io.egm.controller"), "{bad}: {p}");
        }
        let c = egm("127.0.0.1:6510", Some("192.168.10.20"));
        let pin = c.egm.controller_pin().expect("valid").expect("pinned");
        assert!(pin.admits("192.168.10.20:40000".parse().expect("addr")));
        assert_eq!(egm("127.0.0.1:6510", None).egm.controller_pin(), Ok(None));
    }
}
