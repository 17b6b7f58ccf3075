//! Bumpless ends (issue 19 item 10): how a motion that control ends itself comes to rest.
//! Pure: time is a parameter.
//!
//! A force task that ended by a fault, an operator's stop, a mode switch or a guide session
//! that ended used to go idle at once: robot-io then held the *measured* joints, so the
//! reference on the wire jumped back by the servo's tracking lag and its velocity fell to zero
//! in one cycle; in contact the force stayed where the task had left it. Instead, the motion
//! ends through an [`Ending`], still under the motion's id:
//! - the commanded Cartesian velocity (linear and angular) falls to zero at
//!   [`EndParams::max_accel_m_s2`] / [`EndParams::max_rot_accel_rad_s2`];
//! - in contact, the tool backs away from the surface along the force axes ([`Unload`]): it
//!   accelerates to the task's force-axis speed, and brakes to rest once the measured force
//!   along that direction is below [`EndParams::release_force_n`] (or, without a usable
//!   wrench, once it has backed off the blind distance the last force implies), and never
//!   farther than [`EndParams::max_release_m`]: the force decays, it cannot rise; braking
//!   and backing off are one velocity under the one bound `max_accel_m_s2` (issue 41 item 4:
//!   each at that rate made up to twice);
//! - the final pose is then held for [`EndParams::settle_s`], so the robot's measured joints
//!   reach the reference before robot-io holds them (the hold is then no step);
//! - whatever happens, the end is over after [`EndParams::timeout_s`].

use kinematics::brake::{brake_vec3 as toward_zero, braking_speed, toward_vec3 as toward};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use serde::{Deserialize, Serialize};

/// `[control.ending]`: how control brings a motion it ends to rest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EndParams {
    /// Deceleration of the TCP's commanded velocity (m/s²).
    pub max_accel_m_s2: f64,
    /// Deceleration of its commanded angular velocity (rad/s²).
    pub max_rot_accel_rad_s2: f64,
    /// In contact, the tool backs off until the measured force along the unloading direction
    /// is below this (N).
    pub release_force_n: f64,
    /// Longest unloading travel (m).
    pub max_release_m: f64,
    /// The final pose is held this long (s) before the motion ends at robot-io.
    pub settle_s: f64,
    /// An end lasts at most this long (s).
    pub timeout_s: f64,
}

impl Default for EndParams {
    fn default() -> Self {
        Self {
            max_accel_m_s2: 1.0,
            max_rot_accel_rad_s2: 2.0,
            release_force_n: 1.0,
            max_release_m: 0.005,
            settle_s: 0.05,
            timeout_s: 3.0,
        }
    }
}

impl EndParams {
    /// Every problem, as `key: message` (empty: valid).
    pub fn problems(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut range = |name: &str, v: f64, lo: f64, hi: f64, unit: &str| {
            if !(v.is_finite() && v >= lo && v <= hi) {
                out.push(format!(
                    "{prefix}.{name}: {v} is outside [{lo}, {hi}] {unit}"
                ));
            }
        };
        range("max_accel_m_s2", self.max_accel_m_s2, 0.05, 20.0, "m/s²");
        range(
            "max_rot_accel_rad_s2",
            self.max_rot_accel_rad_s2,
            0.05,
            50.0,
            "rad/s²",
        );
        range("release_force_n", self.release_force_n, 0.05, 20.0, "N");
        range("max_release_m", self.max_release_m, 0.0, 0.05, "m");
        range("settle_s", self.settle_s, 0.0, 1.0, "s");
        range("timeout_s", self.timeout_s, 0.1, 30.0, "s");
        out
    }
}

/// Backing off a surface at the end of a force task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unload {
    /// Unit vector (base): the way the surface pushes the tool, within the task's
    /// translational force axes.
    pub dir: Vector3<f64>,
    /// Speed to back off at (m/s): the task's force-axis speed limit.
    pub speed_m_s: f64,
    /// How far to back off when the force cannot be measured (m): an estimate of the press
    /// depth from the last usable force (capped by [`EndParams::max_release_m`]).
    pub blind_m: f64,
}

impl Unload {
    /// The unloading of a tool pressed by `force_on_tool_n` (the surface's force on the tool,
    /// base), restricted to the unit directions `force_axes` (base; the task's translational
    /// force axes), or `None` when it presses less than `release_force_n` along them.
    /// `stiffness_n_per_m` is the stiffest the surface is believed to be (for the blind
    /// distance: twice the depth that force would press into it, plus 0.2 mm).
    pub fn from_force(
        force_on_tool_n: &Vector3<f64>,
        force_axes: &[Vector3<f64>],
        speed_m_s: f64,
        stiffness_n_per_m: f64,
        release_force_n: f64,
    ) -> Option<Self> {
        let along: Vector3<f64> = force_axes.iter().map(|a| a * a.dot(force_on_tool_n)).sum();
        let f = along.norm();
        if !(f.is_finite() && f >= release_force_n && speed_m_s > 0.0) {
            return None;
        }
        let depth = if stiffness_n_per_m > 0.0 {
            f / stiffness_n_per_m
        } else {
            f64::INFINITY
        };
        Some(Self {
            dir: along / f,
            speed_m_s,
            blind_m: 2.0 * depth + 2e-4,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Unloading {
    u: Unload,
    travelled: f64,
    limit_m: f64,
    released: bool,
}

/// A motion coming to rest (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ending {
    p: EndParams,
    pose: Isometry3<f64>,
    v: Vector3<f64>,
    w: Vector3<f64>,
    unload: Option<Unloading>,
    elapsed_s: f64,
    still_s: f64,
}

/// One step of an [`Ending`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndStep {
    pub pose: Isometry3<f64>,
    /// The end is complete: the motion may end at robot-io.
    pub done: bool,
    /// Unloading travel so far (m).
    pub unloaded_m: f64,
}

impl Ending {
    /// An end from the last command `pose` moving at `v_m_s` / `w_rad_s` (base).
    pub fn new(
        p: EndParams,
        pose: Isometry3<f64>,
        v_m_s: Vector3<f64>,
        w_rad_s: Vector3<f64>,
        unload: Option<Unload>,
    ) -> Self {
        let finite = |v: Vector3<f64>| {
            if v.iter().all(|x| x.is_finite()) {
                v
            } else {
                Vector3::zeros()
            }
        };
        Self {
            p,
            pose,
            v: finite(v_m_s),
            w: finite(w_rad_s),
            unload: unload.map(|u| Unloading {
                u,
                travelled: 0.0,
                limit_m: p.max_release_m,
                released: false,
            }),
            elapsed_s: 0.0,
            still_s: 0.0,
        }
    }

    /// Whether the end backs off a surface.
    pub fn unloads(&self) -> bool {
        self.unload.is_some()
    }

    /// One cycle of `dt_s` (s); `force_on_tool_n`: the measured force of the surface on the
    /// tool (base), `None` when no usable wrench is at hand.
    pub fn step(&mut self, dt_s: f64, force_on_tool_n: Option<&Vector3<f64>>) -> EndStep {
        let dt = if dt_s.is_finite() {
            dt_s.clamp(0.0, 0.05)
        } else {
            0.0
        };
        self.elapsed_s += dt;
        self.w = toward_zero(&self.w, self.p.max_rot_accel_rad_s2 * dt);
        let a = self.p.max_accel_m_s2;
        // Where the command's velocity goes: to rest, or backing off along the unloading
        // direction while the tool still presses.
        let mut target = Vector3::zeros();
        let mut unloading = false;
        if let Some(un) = self.unload.as_mut() {
            let pressing = match force_on_tool_n {
                Some(f) => f.dot(&un.u.dir) >= self.p.release_force_n,
                None => un.travelled < un.u.blind_m,
            };
            if !pressing {
                un.released = true;
            }
            let left = (un.limit_m - un.travelled).max(0.0);
            if !(un.released || left <= 0.0) {
                // Never faster than it can stop within the travel that is left.
                target = un.u.dir * un.u.speed_m_s.min(braking_speed(left, a, 0.0));
                unloading = true;
            }
        }
        // One velocity under one acceleration bound (issue 41 item 4): braking the motion and
        // backing off share it, so the command's acceleration never exceeds `max_accel_m_s2`
        // (braking at that rate while unloading accelerated at it again made up to twice).
        self.v = toward(&self.v, &target, a * dt);
        let mut step = self.v * dt;
        if let Some(un) = self.unload.as_mut() {
            // Net travel along the unloading direction (braking into the surface first counts
            // against it), never past the release limit.
            let left = (un.limit_m - un.travelled).max(0.0);
            let along = step.dot(&un.u.dir);
            if along > left {
                step -= un.u.dir * (along - left);
                self.v = step / dt.max(f64::MIN_POSITIVE);
            }
            un.travelled += step.dot(&un.u.dir);
        }
        let moving = self.v.norm() > 0.0 || self.w.norm() > 0.0 || unloading;
        self.pose = Isometry3::from_parts(
            Translation3::from(self.pose.translation.vector + step),
            UnitQuaternion::from_scaled_axis(self.w * dt) * self.pose.rotation,
        );
        if moving {
            self.still_s = 0.0;
        } else {
            self.still_s += dt;
        }
        EndStep {
            pose: self.pose,
            done: (!moving && self.still_s >= self.p.settle_s)
                || self.elapsed_s >= self.p.timeout_s,
            unloaded_m: self.unload.map_or(0.0, |u| u.travelled.max(0.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.004;

    fn run(
        e: &mut Ending,
        force: impl Fn(&Isometry3<f64>) -> Option<Vector3<f64>>,
    ) -> Vec<EndStep> {
        let mut out = Vec::new();
        let mut pose = e.pose;
        for _ in 0..2000 {
            let f = force(&pose);
            let s = e.step(DT, f.as_ref());
            pose = s.pose;
            out.push(s);
            if s.done {
                break;
            }
        }
        out
    }

    /// Velocity of consecutive poses, and its change per step.
    fn kinematics(start: &Isometry3<f64>, v0: Vector3<f64>, steps: &[EndStep]) -> (f64, f64) {
        let mut prev = start.translation.vector;
        let mut pv = v0;
        let (mut vmax, mut amax) = (0.0f64, 0.0f64);
        for s in steps {
            let p = s.pose.translation.vector;
            let v = (p - prev) / DT;
            vmax = vmax.max(v.norm());
            amax = amax.max((v - pv).norm() / DT);
            prev = p;
            pv = v;
        }
        (vmax, amax)
    }

    #[test]
    fn a_moving_command_comes_to_rest_within_the_deceleration_then_settles() {
        let p = EndParams::default();
        let start = Isometry3::translation(0.4, 0.0, 0.3);
        let v0 = Vector3::new(0.1, -0.05, 0.0);
        let mut e = Ending::new(p, start, v0, Vector3::new(0.0, 0.0, 0.5), None);
        let steps = run(&mut e, |_| None);
        let last = steps.last().copied().unwrap_or_else(|| panic!("no step"));
        assert!(last.done);
        let (_, amax) = kinematics(&start, v0, &steps);
        assert!(amax <= p.max_accel_m_s2 * 1.0001, "{amax}");
        // Braking distance v²/2a (+ one step).
        let d = (last.pose.translation.vector - start.translation.vector).norm();
        let v = v0.norm();
        assert!(d <= v * v / (2.0 * p.max_accel_m_s2) + v * DT, "{d}");
        // At rest for settle_s before the end; well before the timeout.
        let rest = steps
            .iter()
            .rev()
            .take_while(|s| s.pose == last.pose)
            .count();
        assert!(rest as f64 * DT >= p.settle_s - 1e-9, "{rest}");
        assert!((steps.len() as f64) * DT < p.timeout_s);
    }

    #[test]
    fn in_contact_the_force_decays_and_the_tool_stops_once_released() {
        let p = EndParams::default();
        // A table under the tool at z = 0.3 − 0.5 mm (10 N on 2·10⁴ N/m); the surface pushes
        // the tool up (+z).
        let k = 2e4;
        let top = 0.3 + 0.0005;
        let force = |pose: &Isometry3<f64>| {
            let depth = (top - pose.translation.z).max(0.0);
            Some(Vector3::new(0.0, 0.0, k * depth))
        };
        let start = Isometry3::translation(0.4, 0.0, 0.3);
        let un = Unload::from_force(
            &Vector3::new(0.3, 0.0, 10.0),
            &[Vector3::z()],
            0.005,
            k,
            p.release_force_n,
        )
        .unwrap_or_else(|| panic!("pressing 10 N"));
        assert!((un.dir - Vector3::z()).norm() < 1e-12);
        let mut e = Ending::new(
            p,
            start,
            Vector3::new(0.02, 0.0, 0.0),
            Vector3::zeros(),
            Some(un),
        );
        let steps = run(&mut e, force);
        let last = steps.last().copied().unwrap_or_else(|| panic!("no step"));
        assert!(last.done && last.unloaded_m > 0.0);
        let mut prev_f = 10.0;
        for s in &steps {
            let f = force(&s.pose).map_or(0.0, |f| f.z);
            assert!(f <= prev_f + 1e-9, "the force rose: {prev_f} → {f}");
            prev_f = f;
        }
        assert!(prev_f < p.release_force_n, "still {prev_f} N");
        // Backed off no more than needed + braking, never past the cap.
        assert!(last.unloaded_m < 0.0005 + 0.00005 && last.unloaded_m <= p.max_release_m);
        let (vmax, amax) = kinematics(&start, Vector3::new(0.02, 0.0, 0.0), &steps);
        assert!(
            vmax <= 0.02 + 1e-9 && amax <= p.max_accel_m_s2 * 1.0001,
            "{vmax} {amax}"
        );
    }

    #[test]
    fn without_a_wrench_it_backs_off_the_blind_distance_and_never_beyond_the_cap() {
        let p = EndParams::default();
        let start = Isometry3::translation(0.4, 0.0, 0.3);
        let axes = [Vector3::z()];
        let un = Unload::from_force(&Vector3::new(0.0, 0.0, 10.0), &axes, 0.005, 1e6, 1.0)
            .unwrap_or_else(|| panic!("pressing"));
        assert!((un.blind_m - (2.0 * 1e-5 + 2e-4)).abs() < 1e-12);
        let mut e = Ending::new(p, start, Vector3::zeros(), Vector3::zeros(), Some(un));
        let last = *run(&mut e, |_| None)
            .last()
            .unwrap_or_else(|| panic!("no step"));
        assert!(last.done);
        assert!(
            last.unloaded_m >= un.blind_m && last.unloaded_m < un.blind_m + 5e-5,
            "{}",
            last.unloaded_m
        );
        // A soft surface's estimate asks for more than the cap: the cap holds.
        let soft = Unload::from_force(&Vector3::new(0.0, 0.0, 10.0), &axes, 0.005, 100.0, 1.0)
            .unwrap_or_else(|| panic!("pressing"));
        let mut e = Ending::new(p, start, Vector3::zeros(), Vector3::zeros(), Some(soft));
        let last = *run(&mut e, |_| None)
            .last()
            .unwrap_or_else(|| panic!("no step"));
        assert!(
            last.done && (last.unloaded_m - p.max_release_m).abs() < 1e-9,
            "{}",
            last.unloaded_m
        );
    }

    #[test]
    fn no_unload_below_the_release_force_or_off_the_force_axes() {
        let axes = [Vector3::z()];
        assert!(Unload::from_force(&Vector3::new(0.0, 0.0, 0.5), &axes, 0.005, 2e4, 1.0).is_none());
        // 20 N sideways is friction on the position axes, not a press along the force axis.
        assert!(
            Unload::from_force(&Vector3::new(20.0, 0.0, 0.2), &axes, 0.005, 2e4, 1.0).is_none()
        );
        assert!(
            Unload::from_force(&Vector3::new(0.0, 0.0, f64::NAN), &axes, 0.005, 2e4, 1.0).is_none()
        );
    }

    #[test]
    fn an_end_never_outlasts_its_timeout_and_bad_input_stays_finite() {
        let p = EndParams {
            timeout_s: 0.2,
            ..EndParams::default()
        };
        let start = Isometry3::translation(0.4, 0.0, 0.3);
        let mut e = Ending::new(
            p,
            start,
            Vector3::new(f64::NAN, 0.0, 0.0),
            Vector3::zeros(),
            None,
        );
        let mut n = 0;
        loop {
            let s = e.step(f64::NAN, None);
            assert!(s.pose.translation.vector.iter().all(|v| v.is_finite()));
            let s = e.step(DT, None);
            n += 1;
            if s.done {
                break;
            }
            assert!(n < 100);
        }
        assert!(EndParams::default().problems("control.ending").is_empty());
        let bad = EndParams {
            max_accel_m_s2: 0.0,
            timeout_s: f64::NAN,
            ..EndParams::default()
        };
        assert_eq!(bad.problems("control.ending").len(), 2);
    }
}
