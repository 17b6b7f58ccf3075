//! The control modes' pure core: one `step` per tool pose (i.e. per robot cycle).
//!
//! Modes available now: `Idle` (publishes nothing → robot-io holds), `Hold` (actively holds the
//! TCP pose captured on entry) and `Move` (straight-line TCP move with a smooth, speed-bounded
//! profile, then hold at the target). Lead-through, hybrid force control and playback arrive
//! with their issues; requesting them is refused with a clear error, never faked.

use common::msg::{CartesianTarget, Mode, MoveTarget, SafetyLevel};
use kinematics::node::{from_msg_pose, to_msg_pose};
use nalgebra::Isometry3;

/// A straight-line move in progress.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MoveState {
    from: Isometry3<f64>,
    to: Isometry3<f64>,
    start_s: f64,
    duration_s: f64,
}

/// Mode request outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeError {
    NotAvailable(Mode),
    SafetyStop(SafetyLevel),
}

impl std::fmt::Display for ModeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModeError::NotAvailable(m) => write!(f, "mode {m:?} is not available in this build"),
            ModeError::SafetyStop(l) => write!(f, "refused: robot-io is in {l:?}; reset first"),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ControlCore {
    mode: Mode,
    hold: Option<Isometry3<f64>>,
    mv: Option<MoveState>,
    pending_move: Option<MoveTarget>,
    safety: SafetyLevel,
}

/// Duration of a smoothstep move whose peak speeds stay within the limits.
/// Smoothstep s(τ) = 3τ² − 2τ³ peaks at ds/dτ = 1.5, so T = 1.5 · max(d / v, θ / ω).
pub fn move_duration_s(from: &Isometry3<f64>, to: &Isometry3<f64>, v: f64, w: f64) -> f64 {
    let d = (to.translation.vector - from.translation.vector).norm();
    let th = from.rotation.angle_to(&to.rotation);
    (1.5 * (d / v).max(th / w)).max(1e-3)
}

/// Smoothstep interpolation between two poses (position linear, orientation slerp).
pub fn interpolate(from: &Isometry3<f64>, to: &Isometry3<f64>, tau: f64) -> Isometry3<f64> {
    let tau = tau.clamp(0.0, 1.0);
    let s = tau * tau * (3.0 - 2.0 * tau);
    let p = from.translation.vector.lerp(&to.translation.vector, s);
    let r = from.rotation.slerp(&to.rotation, s);
    Isometry3::from_parts(p.into(), r)
}

impl ControlCore {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether a move is done (or no move active).
    pub fn move_done(&self, now_s: f64) -> bool {
        self.mv.is_none_or(|m| now_s >= m.start_s + m.duration_s)
    }

    /// Safety state from robot-io: a protective or emergency stop drops to Idle.
    pub fn on_safety(&mut self, level: SafetyLevel) {
        self.safety = level;
        if matches!(
            level,
            SafetyLevel::ProtectiveStop | SafetyLevel::EmergencyStop
        ) && self.mode != Mode::Idle
        {
            self.enter(Mode::Idle);
        }
    }

    pub fn request_mode(&mut self, mode: Mode) -> Result<(), ModeError> {
        match mode {
            Mode::Idle => {
                self.enter(Mode::Idle);
                Ok(())
            }
            _ if matches!(
                self.safety,
                SafetyLevel::ProtectiveStop | SafetyLevel::EmergencyStop
            ) =>
            {
                Err(ModeError::SafetyStop(self.safety))
            }
            Mode::Hold => {
                self.enter(Mode::Hold);
                Ok(())
            }
            // Move needs a target (`request_move`); without one it holds where it is.
            Mode::Move => {
                self.enter(Mode::Hold);
                Ok(())
            }
            m @ (Mode::LeadThrough | Mode::Hybrid | Mode::Playback) => {
                Err(ModeError::NotAvailable(m))
            }
        }
    }

    /// Starts a straight-line move on the next step (switches to `Move`).
    pub fn request_move(&mut self, target: MoveTarget) -> Result<(), ModeError> {
        if matches!(
            self.safety,
            SafetyLevel::ProtectiveStop | SafetyLevel::EmergencyStop
        ) {
            return Err(ModeError::SafetyStop(self.safety));
        }
        self.enter(Mode::Move);
        self.pending_move = Some(target);
        Ok(())
    }

    fn enter(&mut self, mode: Mode) {
        self.mode = mode;
        self.hold = None;
        self.mv = None;
        self.pending_move = None;
    }

    /// One cycle: the measured TCP pose and the cycle time → the Cartesian target, or `None`
    /// (Idle: robot-io holds by itself).
    pub fn step(&mut self, tcp: &Isometry3<f64>, now_s: f64) -> Option<CartesianTarget> {
        match self.mode {
            Mode::Idle => None,
            Mode::Hold => {
                let h = *self.hold.get_or_insert(*tcp);
                Some(CartesianTarget::Pose(to_msg_pose(&h)))
            }
            Mode::Move => {
                if let Some(t) = self.pending_move.take() {
                    let to = from_msg_pose(&t.tcp_in_base);
                    let duration_s =
                        move_duration_s(tcp, &to, t.max_speed_m_s, t.max_rot_speed_rad_s);
                    self.mv = Some(MoveState {
                        from: *tcp,
                        to,
                        start_s: now_s,
                        duration_s,
                    });
                }
                let m = self.mv?;
                let tau = (now_s - m.start_s) / m.duration_s;
                Some(CartesianTarget::Pose(to_msg_pose(&interpolate(
                    &m.from, &m.to, tau,
                ))))
            }
            Mode::LeadThrough | Mode::Hybrid | Mode::Playback => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::msg::Pose;
    use nalgebra::{Translation3, UnitQuaternion, Vector3};

    fn pose(x: f64, y: f64, z: f64) -> Isometry3<f64> {
        Isometry3::from_parts(
            Translation3::new(x, y, z),
            UnitQuaternion::from_axis_angle(&Vector3::y_axis(), std::f64::consts::FRAC_PI_2),
        )
    }

    #[test]
    fn idle_publishes_nothing_and_hold_captures_pose() {
        let mut c = ControlCore::default();
        assert_eq!(c.step(&pose(0.3, 0.0, 0.5), 0.0), None);
        c.request_mode(Mode::Hold).expect("hold");
        let a = c.step(&pose(0.3, 0.0, 0.5), 0.0);
        let b = c.step(&pose(0.31, 0.0, 0.5), 0.004);
        assert_eq!(a, b, "hold keeps the pose captured on entry");
    }

    #[test]
    fn move_is_speed_bounded_and_ends_at_target() {
        let mut c = ControlCore::default();
        let start = pose(0.374, 0.0, 0.63);
        let target = pose(0.374, 0.1, 0.53);
        let v = 0.1;
        c.request_move(MoveTarget {
            tcp_in_base: to_msg_pose(&target),
            max_speed_m_s: v,
            max_rot_speed_rad_s: 1.0,
            ..Default::default()
        })
        .expect("move");
        let dt = 0.004;
        let mut prev = start;
        let mut t = 0.0;
        let mut last = None;
        for _ in 0..2000 {
            let Some(CartesianTarget::Pose(p)) = c.step(&start, t) else {
                panic!("move must publish poses")
            };
            let iso = from_msg_pose(&p);
            let speed = (iso.translation.vector - prev.translation.vector).norm() / dt;
            assert!(speed <= v * 1.001, "speed {speed}");
            prev = iso;
            last = Some(p);
            t += dt;
        }
        let end: Pose = last.expect("some");
        assert!(
            (from_msg_pose(&end).translation.vector - target.translation.vector).norm() < 1e-12
        );
        assert!(c.move_done(t));
    }

    #[test]
    fn unavailable_modes_and_safety_stop_are_refused() {
        let mut c = ControlCore::default();
        assert_eq!(
            c.request_mode(Mode::Hybrid),
            Err(ModeError::NotAvailable(Mode::Hybrid))
        );
        c.request_mode(Mode::Hold).expect("hold");
        c.on_safety(SafetyLevel::EmergencyStop);
        assert_eq!(c.mode(), Mode::Idle);
        assert!(c.request_mode(Mode::Hold).is_err());
        c.on_safety(SafetyLevel::Hold);
        assert!(c.request_mode(Mode::Hold).is_ok());
    }
}
