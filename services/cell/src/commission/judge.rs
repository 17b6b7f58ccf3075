//! The figures and verdicts of `cell commission`, from recorded samples: pure functions (no
//! bus, no clock; times are parameters), so every verdict is unit-tested on made-up data.

use nalgebra::{Matrix3, Rotation3, UnitQuaternion, Vector3};
use serde::Serialize;

/// Sorted copy's `p`-quantile (0..=1), nearest rank; NaN for no data.
pub fn quantile(xs: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let k = ((p.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}

/// `x ≤ lim`, false for NaN (an unknown figure never passes).
pub fn at_most(x: f64, lim: f64) -> bool {
    x <= lim
}

/// `x ≥ lim`, false for NaN.
pub fn at_least(x: f64, lim: f64) -> bool {
    x >= lim
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn std(xs: &[f64]) -> f64 {
    let m = mean(xs);
    if xs.len() < 2 {
        return f64::NAN;
    }
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// One joint state as the EGM link check sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSample {
    /// robot-io's cycle counter.
    pub cycle: u64,
    /// When robot-io produced it (host monotonic, s).
    pub host_s: f64,
    /// The robot time it spans (s): one controller cycle, or more after lost datagrams.
    pub period_s: f64,
}

/// The EGM link over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EgmLink {
    pub window_s: f64,
    pub received: usize,
    pub expected_cycle_ms: f64,
    pub rate_hz: f64,
    /// Controller cycles with no datagram (from the robot time each one spans).
    pub lost: u64,
    pub loss_pct: f64,
    /// Arrival interval on this host, minus the controller's cycle: σ, p99 of |·|, max (ms).
    pub jitter_std_ms: f64,
    pub jitter_p99_ms: f64,
    pub max_gap_ms: f64,
}

/// Targets of the EGM link check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkTargets {
    /// Largest loss tolerated (%).
    pub max_loss_pct: f64,
    /// Largest p99 arrival jitter (ms).
    pub max_jitter_p99_ms: f64,
}

impl Default for LinkTargets {
    fn default() -> Self {
        // A dedicated link between the IRC5 and the PC loses nothing; one datagram in a
        // thousand is already the loss that pulls a path off by millimetres (docs/leadthrough.md).
        // Half a cycle of jitter at 250 Hz is what robot-io's replies can absorb.
        LinkTargets {
            max_loss_pct: 0.1,
            max_jitter_p99_ms: 2.0,
        }
    }
}

/// The link's figures from the joint states received over `window_s` seconds; the
/// controller's cycle is `cycle_s` (the RAPID module's `\SampleRate`).
pub fn egm_link(samples: &[LinkSample], window_s: f64, cycle_s: f64) -> EgmLink {
    let received = samples.len();
    let mut lost = 0u64;
    for s in samples.iter().skip(1) {
        // A datagram spanning k cycles of robot time had k − 1 lost before it.
        let k = (s.period_s / cycle_s).round();
        if k.is_finite() && k >= 2.0 {
            lost += k as u64 - 1;
        }
    }
    let mut dev = Vec::with_capacity(received);
    let mut max_gap = 0.0f64;
    for w in samples.windows(2) {
        let gap = w[1].host_s - w[0].host_s;
        max_gap = max_gap.max(gap);
        // Interval against the robot time it spans (a lost datagram is loss, not jitter).
        dev.push(gap - w[1].period_s);
    }
    let abs: Vec<f64> = dev.iter().map(|d| d.abs()).collect();
    let total = received as u64 + lost;
    EgmLink {
        window_s,
        received,
        expected_cycle_ms: cycle_s * 1e3,
        rate_hz: if window_s > 0.0 {
            received as f64 / window_s
        } else {
            0.0
        },
        lost,
        loss_pct: if total > 0 {
            100.0 * lost as f64 / total as f64
        } else {
            0.0
        },
        jitter_std_ms: std(&dev) * 1e3,
        jitter_p99_ms: quantile(&abs, 0.99) * 1e3,
        max_gap_ms: max_gap * 1e3,
    }
}

impl EgmLink {
    /// `None`: within the targets; else what is wrong, worst first.
    pub fn problems(&self, t: &LinkTargets) -> Vec<String> {
        let mut p = Vec::new();
        let expected = self.window_s / (self.expected_cycle_ms * 1e-3);
        if self.received == 0 {
            p.push("no EGM datagram reached robot-io".to_string());
            return p;
        }
        if (self.received as f64) < 0.5 * expected {
            p.push(format!(
                "{} datagrams in {:.0} s, {:.0} expected at {} ms",
                self.received, self.window_s, expected, self.expected_cycle_ms
            ));
        }
        if self.loss_pct > t.max_loss_pct {
            p.push(format!(
                "{:.2} % of the controller's datagrams lost ({} of {}; target ≤ {} %)",
                self.loss_pct,
                self.lost,
                self.lost + self.received as u64,
                t.max_loss_pct
            ));
        }
        if self.jitter_p99_ms.is_finite() && self.jitter_p99_ms > t.max_jitter_p99_ms {
            p.push(format!(
                "arrival jitter p99 {:.2} ms (target ≤ {} ms)",
                self.jitter_p99_ms, t.max_jitter_p99_ms
            ));
        }
        p
    }
}

/// The sensor at rest over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FtRest {
    pub window_s: f64,
    pub samples: usize,
    pub rate_hz: f64,
    /// Device sample counter gaps (samples the box produced that never arrived).
    pub missed: u64,
    /// Samples with a non-zero device status word.
    pub bad_status: usize,
    /// Mean per channel (N, N·m): the unloaded reading plus the tool's weight.
    pub mean: [f64; 6],
    /// Standard deviation per channel.
    pub noise: [f64; 6],
    /// Mean of the last fifth minus the mean of the first fifth, per channel.
    pub drift: [f64; 6],
}

/// Targets of the rest check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RestTargets {
    pub nominal_hz: f64,
    /// Rate within this fraction of the nominal.
    pub rate_tolerance: f64,
    pub max_noise_force_n: f64,
    pub max_noise_torque_nm: f64,
    pub max_drift_force_n: f64,
    pub max_drift_torque_nm: f64,
}

impl RestTargets {
    /// Defaults for a wrist sensor of the IRB 120's class (SRI M8128, ATI Mini45): noise a few
    /// tenths of a newton, drift a few tenths over half a minute. The force laws' dead band is
    /// 0.1 N; a noisier sensor makes guiding twitch and the 1 N press ride on noise.
    pub fn new(nominal_hz: f64) -> Self {
        RestTargets {
            nominal_hz,
            rate_tolerance: 0.05,
            max_noise_force_n: 0.5,
            max_noise_torque_nm: 0.025,
            max_drift_force_n: 0.5,
            max_drift_torque_nm: 0.025,
        }
    }
}

/// The rest figures from `(host time s, device counter, status, wrench)` samples.
pub fn ft_rest(samples: &[(f64, u32, u32, [f64; 6])], window_s: f64) -> FtRest {
    let n = samples.len();
    let mut mean_v = [0.0; 6];
    let mut noise = [0.0; 6];
    let mut drift = [0.0; 6];
    let fifth = (n / 5).max(1);
    for c in 0..6 {
        let xs: Vec<f64> = samples.iter().map(|s| s.3[c]).collect();
        mean_v[c] = mean(&xs);
        noise[c] = std(&xs);
        if n >= 2 {
            drift[c] = mean(&xs[n - fifth..]) - mean(&xs[..fifth]);
        }
    }
    let mut missed = 0u64;
    for w in samples.windows(2) {
        let d = w[1].1.wrapping_sub(w[0].1);
        if d > 1 && d < u32::MAX / 2 {
            missed += u64::from(d - 1);
        }
    }
    FtRest {
        window_s,
        samples: n,
        rate_hz: if window_s > 0.0 {
            n as f64 / window_s
        } else {
            0.0
        },
        missed,
        bad_status: samples.iter().filter(|s| s.2 != 0).count(),
        mean: mean_v,
        noise,
        drift,
    }
}

const CH: [&str; 6] = ["Fx", "Fy", "Fz", "Tx", "Ty", "Tz"];

impl FtRest {
    #[allow(clippy::needless_range_loop)] // six channels, named by index
    pub fn problems(&self, t: &RestTargets) -> Vec<String> {
        let mut p = Vec::new();
        if self.samples == 0 {
            p.push("no F/T sample arrived".into());
            return p;
        }
        if (self.rate_hz - t.nominal_hz).abs() > t.rate_tolerance * t.nominal_hz {
            p.push(format!(
                "{:.0} samples/s, configured {:.0}",
                self.rate_hz, t.nominal_hz
            ));
        }
        if self.bad_status > 0 {
            p.push(format!(
                "{} samples with a device error status",
                self.bad_status
            ));
        }
        for c in 0..6 {
            let (lim_n, lim_d, unit) = if c < 3 {
                (t.max_noise_force_n, t.max_drift_force_n, "N")
            } else {
                (t.max_noise_torque_nm, t.max_drift_torque_nm, "N·m")
            };
            if !at_most(self.noise[c], lim_n) {
                p.push(format!(
                    "{} noise σ {:.3} {unit} (target ≤ {lim_n})",
                    CH[c], self.noise[c]
                ));
            }
            if !at_most(self.drift[c].abs(), lim_d) {
                p.push(format!(
                    "{} drift {:+.3} {unit} over {:.0} s (target ≤ {lim_d})",
                    CH[c], self.drift[c], self.window_s
                ));
            }
        }
        p
    }
}

/// One push of the mounting-frame check: the direction pushed (base axes, unit) and the mean
/// contact force the force service read meanwhile (base axes, N).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    pub pushed_base: Vector3<f64>,
    pub read_base: Vector3<f64>,
}

/// The mounting-frame verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameCheck {
    /// Per push: "+x read as +y (14.9 N, 90° off)".
    pub reads: Vec<String>,
    /// Largest angle between a push and its reading (deg).
    pub worst_angle_deg: f64,
    /// Reading magnitude over the pushed force, per push.
    pub gains: Vec<f64>,
    /// The sensor's true frame in the configured one (best fit over the pushes): rotation
    /// angle (deg) and axis in the configured sensor frame.
    pub mount_error_deg: f64,
    pub mount_error_axis_sensor: [f64; 3],
    /// In words: "rotated +90° about the sensor's z".
    pub mount_error: String,
}

fn axis_name(v: &Vector3<f64>) -> String {
    let (i, m) = v
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .map(|(i, m)| (i, *m))
        .unwrap_or((0, 0.0));
    format!("{}{}", if m < 0.0 { "−" } else { "+" }, ["x", "y", "z"][i])
}

/// Best rotation `e` with `read ≈ e · pushed` over the pushes (Kabsch, proper rotation).
pub fn fit_rotation(pushes: &[Push]) -> Rotation3<f64> {
    let mut h = Matrix3::zeros();
    for p in pushes {
        let r = p
            .read_base
            .try_normalize(1e-9)
            .unwrap_or_else(Vector3::zeros);
        h += r * p.pushed_base.transpose();
    }
    let svd = h.svd(true, true);
    match (svd.u, svd.v_t) {
        (Some(u), Some(v_t)) => {
            let mut d = Matrix3::identity();
            if (u * v_t).determinant() < 0.0 {
                d[(2, 2)] = -1.0;
            }
            Rotation3::from_matrix_unchecked(u * d * v_t)
        }
        _ => Rotation3::identity(),
    }
}

/// The mounting-frame figures. `sensor_in_base` is the configured sensor frame's rotation at
/// the pose of the check (from the config's kinematics and the measured joints).
pub fn frame_check(
    pushes: &[Push],
    push_n: f64,
    sensor_in_base: &UnitQuaternion<f64>,
) -> FrameCheck {
    let mut reads = Vec::new();
    let mut gains = Vec::new();
    let mut worst = 0.0f64;
    for p in pushes {
        let ang = p.read_base.try_normalize(1e-9).map_or(180.0, |r| {
            r.dot(&p.pushed_base).clamp(-1.0, 1.0).acos().to_degrees()
        });
        worst = worst.max(ang);
        let g = p.read_base.norm() / push_n;
        gains.push(g);
        reads.push(format!(
            "{} read as {} ({:.1} N, {:.0}° off)",
            axis_name(&p.pushed_base),
            axis_name(&p.read_base),
            p.read_base.norm(),
            ang
        ));
    }
    // read = R_s R_errᵀ R_sᵀ · pushed (the force service turns the true sensor's reading
    // into base axes with the configured frame R_s), so R_err = R_sᵀ Eᵀ R_s.
    let e = fit_rotation(pushes);
    let rs = sensor_in_base.to_rotation_matrix();
    let r_err = rs.inverse() * e.inverse() * rs;
    // Through the quaternion: a rotation matrix's own axis is ill-defined at 180° (a flipped
    // axis), the quaternion's vector part is not.
    let (axis, angle) = UnitQuaternion::from_rotation_matrix(&r_err)
        .axis_angle()
        .map_or((Vector3::z(), 0.0), |(a, ang)| (a.into_inner(), ang));
    let deg = angle.to_degrees();
    let words = if deg < 2.0 {
        "as configured".to_string()
    } else {
        // Name the axis when it is (nearly) a sensor axis.
        let (i, m) = axis
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
            .map(|(i, m)| (i, *m))
            .unwrap_or((2, 1.0));
        let signed = if m < 0.0 { -deg } else { deg };
        if m.abs() > 0.98 {
            format!(
                "rotated {signed:+.0}° about the sensor's {}",
                ["x", "y", "z"][i]
            )
        } else {
            format!(
                "rotated {deg:.0}° about ({:.2}, {:.2}, {:.2}) of the sensor frame",
                axis.x, axis.y, axis.z
            )
        }
    };
    FrameCheck {
        reads,
        worst_angle_deg: worst,
        gains,
        mount_error_deg: deg,
        mount_error_axis_sensor: [axis.x, axis.y, axis.z],
        mount_error: words,
    }
}

impl FrameCheck {
    /// Problems against a largest angle (deg) and a gain window.
    pub fn problems(&self, max_angle_deg: f64, gain_range: (f64, f64)) -> Vec<String> {
        let mut p = Vec::new();
        if self.worst_angle_deg > max_angle_deg {
            p.push(format!(
                "the sensor is {} relative to the config's [arm] sensor_mount ({})",
                self.mount_error,
                self.reads.join("; ")
            ));
        }
        for (r, g) in self.reads.iter().zip(&self.gains) {
            if !(at_least(*g, gain_range.0) && at_most(*g, gain_range.1)) {
                p.push(format!(
                    "{r}: {:.0} % of the push (calibration or tare wrong?)",
                    g * 100.0
                ));
            }
        }
        p
    }
}

/// The payload check: identified vs configured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PayloadCheck {
    pub identified_kg: f64,
    pub configured_kg: f64,
    pub mass_error_kg: f64,
    pub com_error_mm: f64,
}

pub fn payload_check(
    identified_kg: f64,
    identified_com_m: [f64; 3],
    configured_kg: f64,
    configured_com_m: [f64; 3],
) -> PayloadCheck {
    PayloadCheck {
        identified_kg,
        configured_kg,
        mass_error_kg: identified_kg - configured_kg,
        com_error_mm: (Vector3::from(identified_com_m) - Vector3::from(configured_com_m)).norm()
            * 1e3,
    }
}

impl PayloadCheck {
    /// Tolerance: max(20 g, 4 %) of mass, 5 mm of centre of mass — what a 12 Hz force loop
    /// and the 0.1 N dead band notice when the arm turns the tool.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let tol = (0.04 * self.configured_kg.abs()).max(0.02);
        if !at_most(self.mass_error_kg.abs(), tol) {
            p.push(format!(
                "tool mass {:.3} kg identified, the config says {:.3} kg ({:+.3} kg; tolerance ±{tol:.3})",
                self.identified_kg, self.configured_kg, self.mass_error_kg
            ));
        }
        if !at_most(self.com_error_mm, 5.0) {
            p.push(format!(
                "centre of mass {:.1} mm from the config's (tolerance 5 mm)",
                self.com_error_mm
            ));
        }
        p
    }
}

/// The IRC5 module's tool load against the identified payload: a controller that models less
/// load than the arm carries runs its motion and collision supervision on a wrong model. More
/// is allowed (the sensor body above its measuring plane, which identification cannot weigh).
/// Tolerance as [`PayloadCheck::problems`]: max(20 g, 4 %).
pub fn module_load_problems(identified_kg: f64, module_kg: f64) -> Vec<String> {
    let tol = (0.04 * identified_kg.abs()).max(0.02);
    if at_most(identified_kg - module_kg, tol) {
        Vec::new()
    } else {
        vec![format!(
            "the IRC5 module's cell_tool load is {module_kg:.3} kg, lighter than the {identified_kg:.3} kg identified (tolerance {tol:.3} kg)"
        )]
    }
}

/// The cell's security as commissioning judges it: (one line of figures, problems). A real
/// cell (no simulator) must be secured unless the operator said otherwise, must not carry the
/// simulator's profile, and its EGM controller must be pinned; a simulated cell may run
/// unsecured.
pub fn security_problems(
    security: Option<&common::security::SecuritySection>,
    simulated: bool,
    allow_unsecured: bool,
    egm_pin: Option<&str>,
    drives_egm: bool,
) -> (String, Vec<String>) {
    use common::security::ProfileKind;
    let mut problems = Vec::new();
    let figures = match security {
        None => {
            if !simulated && !allow_unsecured {
                problems.push("the cell is unsecured: plain TCP and no access control, so anyone on the cell network can command the arm or reset its e-stop".to_string());
            }
            "unsecured (no [cell.security])".to_string()
        }
        Some(s) => {
            if !simulated && s.profile == ProfileKind::Sim {
                problems.push(
                    "a real cell with the simulator's profile: its identity and RPCs are allowed"
                        .to_string(),
                );
            }
            if simulated && s.profile == ProfileKind::Real {
                problems.push(
                    "a simulated cell with the real profile: the simulator is refused".to_string(),
                );
            }
            format!(
                "{:?} profile, mutual TLS over QUIC, access control; operators {} ({} reset)",
                s.profile,
                s.operators.join(", "),
                if s.operators_may_reset {
                    "may"
                } else {
                    "may not"
                }
            )
        }
    };
    let pin = match (drives_egm, egm_pin) {
        (false, _) => String::new(),
        (true, Some(p)) => format!("; EGM controller pinned to {p}"),
        (true, None) => {
            if !simulated {
                problems.push(
                    "robot_io.egm.controller unset: robot-io answers any host's EGM datagrams"
                        .to_string(),
                );
            }
            "; EGM controller unpinned".to_string()
        }
    };
    (format!("{figures}{pin}"), problems)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_module_load_lighter_than_the_identified_payload_is_named() {
        assert!(module_load_problems(0.5, 0.5).is_empty());
        assert!(
            module_load_problems(0.5, 0.9).is_empty(),
            "a sensor body may add"
        );
        assert!(module_load_problems(0.5, 0.485).is_empty());
        let p = module_load_problems(0.5, 0.0);
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("lighter"), "{p:?}");
        assert_eq!(module_load_problems(f64::NAN, 0.5).len(), 1);
    }

    /// `n` datagrams received of a 4 ms controller; every `lose_every`-th sent one lost;
    /// arrivals alternately `jitter` s late.
    fn link(n: usize, lose_every: Option<usize>, jitter: f64) -> Vec<LinkSample> {
        let mut v: Vec<LinkSample> = Vec::new();
        let mut prev_robot = 0.0;
        let mut k = 0usize;
        while v.len() < n {
            k += 1;
            if lose_every.is_some_and(|e| k.is_multiple_of(e)) {
                continue;
            }
            let robot = k as f64 * 0.004;
            let late = if v.len() % 2 == 1 { jitter } else { 0.0 };
            v.push(LinkSample {
                cycle: v.len() as u64,
                host_s: robot + late,
                period_s: if v.is_empty() {
                    0.004
                } else {
                    robot - prev_robot
                },
            });
            prev_robot = robot;
        }
        v
    }

    #[test]
    fn a_clean_link_passes_and_loss_and_jitter_are_named() {
        let t = LinkTargets::default();
        let clean = egm_link(&link(2500, None, 0.0), 10.0, 0.004);
        assert_eq!(clean.lost, 0);
        assert!((clean.rate_hz - 250.0).abs() < 1e-9);
        assert!(clean.problems(&t).is_empty(), "{:?}", clean.problems(&t));
        // Every 20th datagram lost: 5 %.
        let lossy = egm_link(&link(2375, Some(20), 0.0), 10.0, 0.004);
        assert!((lossy.loss_pct - 5.0).abs() < 0.1, "{lossy:?}");
        let p = lossy.problems(&t);
        assert!(p.iter().any(|s| s.contains("lost")), "{p:?}");
        // ±3 ms alternating arrival jitter.
        let jittery = egm_link(&link(2500, None, 0.003), 10.0, 0.004);
        let p = jittery.problems(&t);
        assert!(p.iter().any(|s| s.contains("jitter")), "{jittery:?} {p:?}");
        let none = egm_link(&[], 10.0, 0.004);
        assert_eq!(none.problems(&t), vec!["no EGM datagram reached robot-io"]);
    }

    #[test]
    fn rest_figures_find_noise_drift_rate_and_gaps() {
        let mk = |n: usize, noise: f64, drift: f64| -> Vec<(f64, u32, u32, [f64; 6])> {
            (0..n)
                .map(|i| {
                    let s = if i % 2 == 0 { noise } else { -noise };
                    let d = drift * i as f64 / n as f64;
                    (
                        i as f64 * 1e-3,
                        i as u32,
                        0,
                        [1.0 + s + d, s, -4.9 + s, 0.0, 0.0, 0.0],
                    )
                })
                .collect()
        };
        let t = RestTargets::new(1000.0);
        let ok = ft_rest(&mk(10_000, 0.05, 0.0), 10.0);
        assert!(ok.problems(&t).is_empty(), "{:?}", ok.problems(&t));
        assert!((ok.mean[2] + 4.9).abs() < 1e-3);
        let noisy = ft_rest(&mk(10_000, 1.0, 0.0), 10.0);
        assert!(noisy.problems(&t).iter().any(|p| p.contains("Fx noise")));
        let drifting = ft_rest(&mk(10_000, 0.0, 2.0), 10.0);
        let p = drifting.problems(&t);
        assert!(p.iter().any(|p| p.contains("Fx drift")), "{p:?}");
        assert!(!p.iter().any(|p| p.contains("Fy")), "{p:?}");
        let slow = ft_rest(&mk(5_000, 0.0, 0.0), 10.0);
        assert!(slow.problems(&t).iter().any(|p| p.contains("samples/s")));
        let mut gappy = mk(1000, 0.0, 0.0);
        gappy[500].1 += 3;
        for s in gappy.iter_mut().skip(501) {
            s.1 += 3;
        }
        assert_eq!(ft_rest(&gappy, 1.0).missed, 3);
    }

    fn pushes(truth: &Rotation3<f64>, rs: &UnitQuaternion<f64>, gain: f64) -> Vec<Push> {
        // What the force service reads for a push along each base axis when the sensor's true
        // frame is the configured one turned by `truth` (sensor axes).
        let rs_m = rs.to_rotation_matrix();
        [Vector3::x(), Vector3::y(), Vector3::z()]
            .iter()
            .map(|d| {
                let f_true_sensor = (rs_m * truth).inverse() * (d * 15.0);
                Push {
                    pushed_base: *d,
                    read_base: rs_m * f_true_sensor * gain,
                }
            })
            .collect()
    }

    #[test]
    fn the_frame_check_names_a_quarter_turn_about_z_and_passes_a_right_mount() {
        // The tool pointing down: the sensor's z along −z of the base.
        let rs = UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.3);
        let right = frame_check(&pushes(&Rotation3::identity(), &rs, 1.0), 15.0, &rs);
        assert!(right.problems(10.0, (0.8, 1.2)).is_empty(), "{right:?}");
        assert_eq!(right.mount_error, "as configured");
        let turned = Rotation3::from_euler_angles(0.0, 0.0, std::f64::consts::FRAC_PI_2);
        let c = frame_check(&pushes(&turned, &rs, 1.0), 15.0, &rs);
        assert_eq!(c.mount_error, "rotated +90° about the sensor's z", "{c:?}");
        let p = c.problems(10.0, (0.8, 1.2));
        assert!(p[0].contains("+90° about the sensor's z"), "{p:?}");
        assert!((c.worst_angle_deg - 90.0).abs() < 1e-6, "{c:?}");
        // A flipped x axis (180° about z would flip x and y; 180° about y flips x and z).
        let flipped = Rotation3::from_euler_angles(0.0, std::f64::consts::PI, 0.0);
        let c = frame_check(&pushes(&flipped, &rs, 1.0), 15.0, &rs);
        assert!(c.mount_error.contains("180° about the sensor's y"), "{c:?}");
        // Right frame, half the force: a calibration problem, named per push.
        let weak = frame_check(&pushes(&Rotation3::identity(), &rs, 0.5), 15.0, &rs);
        let p = weak.problems(10.0, (0.8, 1.2));
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("50 %"), "{p:?}");
    }

    #[test]
    fn payload_tolerances() {
        let ok = payload_check(0.505, [0.0, 0.0, 0.041], 0.5, [0.0, 0.0, 0.04]);
        assert!(ok.problems().is_empty(), "{ok:?}");
        let heavy = payload_check(0.8, [0.0, 0.0, 0.04], 0.5, [0.0, 0.0, 0.04]);
        let p = heavy.problems();
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("+0.300 kg"), "{p:?}");
        let off = payload_check(0.5, [0.01, 0.0, 0.04], 0.5, [0.0, 0.0, 0.04]);
        assert!(off.problems()[0].contains("10.0 mm"));
        let nan = payload_check(f64::NAN, [0.0; 3], 0.5, [0.0; 3]);
        assert!(!nan.problems().is_empty());
    }

    #[test]
    fn quantiles() {
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 1.0), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_real_cell_must_be_secured_unless_told_otherwise() {
        use common::security::{ProfileKind, SecuritySection};
        let real = SecuritySection::default();
        let sim = SecuritySection {
            profile: ProfileKind::Sim,
            ..SecuritySection::default()
        };
        let pin = Some("192.168.10.20");
        assert!(security_problems(Some(&real), false, false, pin, true)
            .1
            .is_empty());
        let (f, p) = security_problems(None, false, false, pin, true);
        assert!(f.contains("unsecured") && p.len() == 1, "{f} {p:?}");
        assert!(security_problems(None, false, true, pin, true).1.is_empty());
        assert!(security_problems(None, true, false, None, true)
            .1
            .is_empty());
        assert_eq!(
            security_problems(Some(&sim), false, false, pin, true)
                .1
                .len(),
            1
        );
        assert_eq!(
            security_problems(Some(&real), true, false, pin, true)
                .1
                .len(),
            1
        );
        let (f, p) = security_problems(Some(&real), false, false, None, true);
        assert!(f.contains("unpinned") && p.len() == 1, "{f} {p:?}");
        assert!(security_problems(Some(&real), false, false, None, false)
            .1
            .is_empty());
    }
}
