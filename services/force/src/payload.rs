//! Tool payload identification and gravity compensation (irb120.md §5.3).
//!
//! Model, sensor frame s, static: `f = m·g_s + f0`, `t = c × (m·g_s) + t0` with
//! `g_s = R_bsᵀ g_b`. Linear in θ = [m, m·c (3), f0 (3), t0 (3)]; each pose adds 6 rows
//! (force rows `[g_s, 0, I, 0]`, torque rows `[0, −[g_s]×, 0, I]`), solved by SVD least squares.

use nalgebra::{DMatrix, DVector, Matrix3, Vector3};
use serde::{Deserialize, Serialize};

/// One static pose: gravity in the sensor frame and the averaged raw wrench.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoseSample {
    pub gravity_sensor: Vector3<f64>,
    pub force_n: Vector3<f64>,
    pub torque_nm: Vector3<f64>,
}

/// The tool's gravity model and the sensor offsets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Payload {
    /// Tool mass (kg).
    pub mass_kg: f64,
    /// Centre of mass in the sensor frame (m).
    pub com_m: [f64; 3],
    /// Sensor force offset (N).
    pub force_offset_n: [f64; 3],
    /// Sensor torque offset (N·m).
    pub torque_offset_nm: [f64; 3],
}

impl Payload {
    /// The tool's weight wrench at the sensor origin, sensor axes, for gravity `g_s` (m/s²).
    pub fn weight(&self, g_s: &Vector3<f64>) -> (Vector3<f64>, Vector3<f64>) {
        let f = g_s * self.mass_kg;
        let t = Vector3::from(self.com_m).cross(&f);
        (f, t)
    }

    /// Contact wrench = measured − offsets − weight.
    pub fn compensate(
        &self,
        force: &Vector3<f64>,
        torque: &Vector3<f64>,
        g_s: &Vector3<f64>,
    ) -> (Vector3<f64>, Vector3<f64>) {
        let (wf, wt) = self.weight(g_s);
        (
            force - Vector3::from(self.force_offset_n) - wf,
            torque - Vector3::from(self.torque_offset_nm) - wt,
        )
    }
}

/// Result of an identification.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Identification {
    pub payload: Payload,
    /// RMS of the force / torque residuals over all poses.
    pub residual_force_rms_n: f64,
    pub residual_torque_rms_nm: f64,
    /// Condition number of the regressor (σmax/σmin); large = poorly spread poses.
    pub condition_number: f64,
    pub poses: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IdentifyError {
    #[error("need at least 3 poses with distinct gravity directions, got {0}")]
    TooFewPoses(usize),
    #[error("poses too similar: regressor rank deficient (condition number {0:.3e})")]
    Degenerate(f64),
    #[error("non-finite sample")]
    NonFinite,
    #[error("identified mass {0} kg is not positive")]
    NonPositiveMass(f64),
}

fn skew(v: &Vector3<f64>) -> Matrix3<f64> {
    Matrix3::new(0.0, -v.z, v.y, v.z, 0.0, -v.x, -v.y, v.x, 0.0)
}

/// Least-squares identification of mass, centre of mass and sensor offsets.
pub fn identify(samples: &[PoseSample]) -> Result<Identification, IdentifyError> {
    let n = samples.len();
    if n < 3 {
        return Err(IdentifyError::TooFewPoses(n));
    }
    let mut h = DMatrix::<f64>::zeros(6 * n, 10);
    let mut z = DVector::<f64>::zeros(6 * n);
    for (k, s) in samples.iter().enumerate() {
        let finite = s
            .gravity_sensor
            .iter()
            .chain(s.force_n.iter())
            .chain(s.torque_nm.iter())
            .all(|v| v.is_finite());
        if !finite {
            return Err(IdentifyError::NonFinite);
        }
        let r = 6 * k;
        let g = s.gravity_sensor;
        let mg = -skew(&g);
        for i in 0..3 {
            h[(r + i, 0)] = g[i];
            h[(r + i, 4 + i)] = 1.0;
            for j in 0..3 {
                h[(r + 3 + i, 1 + j)] = mg[(i, j)];
            }
            h[(r + 3 + i, 7 + i)] = 1.0;
            z[r + i] = s.force_n[i];
            z[r + 3 + i] = s.torque_nm[i];
        }
    }
    let svd = h.clone().svd(true, true);
    let smax = svd.singular_values.max();
    let smin = svd.singular_values.min();
    let cond = if smin > 0.0 {
        smax / smin
    } else {
        f64::INFINITY
    };
    if !(cond.is_finite() && cond < 1e8) {
        return Err(IdentifyError::Degenerate(cond));
    }
    let theta = svd
        .solve(&z, 1e-12)
        .map_err(|_| IdentifyError::Degenerate(cond))?;
    let m = theta[0];
    if m.is_nan() || m <= 0.0 {
        return Err(IdentifyError::NonPositiveMass(m));
    }
    let payload = Payload {
        mass_kg: m,
        com_m: [theta[1] / m, theta[2] / m, theta[3] / m],
        force_offset_n: [theta[4], theta[5], theta[6]],
        torque_offset_nm: [theta[7], theta[8], theta[9]],
    };
    let res = &z - &h * &theta;
    let (mut sf, mut st) = (0.0, 0.0);
    for k in 0..n {
        for i in 0..3 {
            sf += res[6 * k + i].powi(2);
            st += res[6 * k + 3 + i].powi(2);
        }
    }
    Ok(Identification {
        payload,
        residual_force_rms_n: (sf / (3 * n) as f64).sqrt(),
        residual_torque_rms_nm: (st / (3 * n) as f64).sqrt(),
        condition_number: cond,
        poses: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(p: &Payload, g: Vector3<f64>, noise: f64, k: usize) -> PoseSample {
        let (wf, wt) = p.weight(&g);
        // Deterministic pseudo-noise.
        let e = |i: usize| noise * (((k * 7 + i * 13) as f64 * 1.7).sin());
        PoseSample {
            gravity_sensor: g,
            force_n: wf + Vector3::from(p.force_offset_n) + Vector3::new(e(0), e(1), e(2)),
            torque_nm: wt
                + Vector3::from(p.torque_offset_nm)
                + Vector3::new(e(3), e(4), e(5)) * 0.04,
        }
    }

    fn directions() -> Vec<Vector3<f64>> {
        let g = 9.81;
        vec![
            Vector3::new(0.0, 0.0, -g),
            Vector3::new(0.0, 0.0, g),
            Vector3::new(g, 0.0, 0.0),
            Vector3::new(-g, 0.0, 0.0),
            Vector3::new(0.0, g, 0.0),
            Vector3::new(0.0, -g, 0.0),
            Vector3::new(g, g, -g) / 3f64.sqrt(),
            Vector3::new(-g, g, g) / 3f64.sqrt(),
        ]
    }

    #[test]
    fn recovers_payload_from_eight_poses() {
        let truth = Payload {
            mass_kg: 1.25,
            com_m: [0.004, -0.012, 0.055],
            force_offset_n: [1.5, -2.0, 3.0],
            torque_offset_nm: [0.05, 0.02, -0.03],
        };
        let s: Vec<_> = directions()
            .into_iter()
            .enumerate()
            .map(|(k, g)| sample(&truth, g, 0.05, k))
            .collect();
        let id = identify(&s).expect("identify");
        assert!(
            (id.payload.mass_kg - 1.25).abs() < 0.0125 * 0.2,
            "{:?}",
            id.payload
        );
        for i in 0..3 {
            assert!(
                (id.payload.com_m[i] - truth.com_m[i]).abs() < 1e-3,
                "{:?}",
                id.payload
            );
            assert!((id.payload.force_offset_n[i] - truth.force_offset_n[i]).abs() < 0.05);
            assert!((id.payload.torque_offset_nm[i] - truth.torque_offset_nm[i]).abs() < 0.005);
        }
        assert!(id.condition_number < 20.0);
        assert!(id.residual_force_rms_n < 0.06);
        // Compensation removes weight and offsets.
        let g = Vector3::new(3.0, -4.0, -8.0);
        let m = sample(&truth, g, 0.0, 0);
        let (f, t) = id.payload.compensate(&m.force_n, &m.torque_nm, &g);
        assert!(f.norm() < 0.05 && t.norm() < 0.005, "{f} {t}");
    }

    #[test]
    fn too_few_or_degenerate_poses_are_refused() {
        let p = Payload {
            mass_kg: 1.0,
            ..Default::default()
        };
        let one = vec![sample(&p, Vector3::new(0.0, 0.0, -9.81), 0.0, 0); 2];
        assert_eq!(identify(&one), Err(IdentifyError::TooFewPoses(2)));
        let same = vec![sample(&p, Vector3::new(0.0, 0.0, -9.81), 0.0, 0); 5];
        assert!(matches!(identify(&same), Err(IdentifyError::Degenerate(_))));
    }
}
