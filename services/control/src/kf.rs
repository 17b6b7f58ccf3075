//! Cai et al.'s stiffness matrix `K_f` (seed eq. 11–12), identified from probes and applied.
//! Pure: no bus, no clock.
//!
//! # Identification (eq. 11)
//! The tool is held rigidly (a fixture: in the seed, bolted to the table). The arm commands one
//! small pose increment at a time, `Δx = [Δp; Δθ]` (m, rad, in the tool frame), and the wrench
//! increment `Δf = [ΔF; ΔM]` (N, N·m, same frame) is read once it has settled. The seed moves one
//! component per probe and divides: column k of `K_f` is `Δf / Δx_k`. With several amplitudes and
//! both signs per component (what a real fixture needs: backlash, noise, the sensor's
//! resolution) the column is the least-squares slope through the origin; for probes in any
//! directions the fit is `K = ΔF·ΔXᵀ·(ΔX·ΔXᵀ)⁻¹` over all of them, which is the per-column slope
//! when each probe moves one component. The seed's `K_f` is sparse with couplings between forces
//! and rotations (K15, K24, K42, K65): nothing here assumes a pattern.
//!
//! # Figures of the fit
//! Translations and rotations have different units, so the condition number and the symmetry
//! error are taken on `K̃ = D·K·D`, `D = diag(1, 1, 1, 1/L, 1/L, 1/L)`, with `L` a length of the
//! tool (rotations read as arc lengths `L·θ`, moments as forces `M/L`): every entry of `K̃` is in
//! N/m. A spring that stores energy is symmetric in these coordinates (`K̃ = K̃ᵀ`): the symmetry
//! error says how far the measured one is from that (friction, a fixture that slips, a probe
//! that had not settled). The residuals are per wrench component, over the probes.
//!
//! # Use (eq. 12)
//! `Δf = K_f·Δx`, so a measured wrench increment gives the pose increment `Δx = K_f⁻¹·Δf` to
//! send to the position controller ([`KfIdentified::increment`]).

use nalgebra::{Matrix6, Matrix6xX, Vector6};

/// One probe: the commanded pose increment and the wrench increment it produced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// `[Δp (m); Δθ (rad)]` in the tool frame.
    pub dx: [f64; 6],
    /// `[ΔF (N); ΔM (N·m)]` in the tool frame.
    pub df: [f64; 6],
}

/// An identified `K_f` and the figures of its fit.
#[derive(Debug, Clone, PartialEq)]
pub struct KfIdentified {
    /// Row i, column j: wrench component i per unit of pose component j (N/m, N/rad, N·m/m,
    /// N·m/rad by block).
    pub k: Matrix6<f64>,
    /// `σ_max/σ_min` of `K̃` (see the module docs).
    pub condition: f64,
    /// `‖K̃ − K̃ᵀ‖_F / ‖K̃‖_F`.
    pub symmetry_error: f64,
    /// RMS residual per wrench component over the probes (N, N·m).
    pub residual_rms: [f64; 6],
    /// The probes the fit used.
    pub probes: usize,
    /// The length `L` (m) the figures were taken with.
    pub length_m: f64,
}

/// The pose components' names, in `Probe::dx` order.
pub const AXES: [&str; 6] = ["x", "y", "z", "rx", "ry", "rz"];

/// A component counts as excited when the probes' motion along it, relative to the most excited
/// one (in `K̃`'s units), is at least this (the fit's normal matrix stays invertible).
pub const MIN_RELATIVE_EXCITATION: f64 = 1e-6;

/// `D = diag(1, 1, 1, 1/L, 1/L, 1/L)`.
fn scaling(length_m: f64) -> Matrix6<f64> {
    let mut d = Matrix6::identity();
    for i in 3..6 {
        d[(i, i)] = 1.0 / length_m;
    }
    d
}

/// Fits `K_f` to `probes` (module docs), its figures taken with the tool length `length_m`.
/// Every problem is listed: too few probes, non-finite values, a component no probe moves.
pub fn identify(probes: &[Probe], length_m: f64) -> Result<KfIdentified, Vec<String>> {
    let mut problems = Vec::new();
    if !(length_m.is_finite() && length_m > 0.0) {
        problems.push(format!("tool length {length_m} m: must be positive"));
    }
    if probes.len() < 6 {
        problems.push(format!(
            "{} probes: at least 6 (one per pose component)",
            probes.len()
        ));
    }
    for (n, p) in probes.iter().enumerate() {
        if !p.dx.iter().chain(p.df.iter()).all(|v| v.is_finite()) {
            problems.push(format!("probe {n}: a non-finite value"));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // In K̃'s units: x̃ = D⁻¹·x, f̃ = D·f, K̃ = D·K·D.
    let d = scaling(length_m);
    let d_inv = Matrix6::from_diagonal(&d.diagonal().map(|v| 1.0 / v));
    let n = probes.len();
    let mut xs = Matrix6xX::<f64>::zeros(n);
    let mut fs = Matrix6xX::<f64>::zeros(n);
    for (j, p) in probes.iter().enumerate() {
        let x = d_inv * Vector6::from_column_slice(&p.dx);
        let f = d * Vector6::from_column_slice(&p.df);
        xs.set_column(j, &x);
        fs.set_column(j, &f);
    }
    let xxt: Matrix6<f64> = &xs * xs.transpose();
    let top = (0..6).map(|i| xxt[(i, i)]).fold(0.0f64, f64::max);
    for (i, name) in AXES.iter().enumerate() {
        if xxt[(i, i)] <= MIN_RELATIVE_EXCITATION * top {
            problems.push(format!("no probe moves {name}"));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // Every component moved, but perhaps only together (one direction for several): the
    // normal matrix is then singular, which its singular values show (an LU may not).
    let nsv = xxt.svd(false, false).singular_values;
    let xxt_inv = match xxt.try_inverse() {
        Some(inv) if nsv.min() > MIN_RELATIVE_EXCITATION * nsv.max() => inv,
        _ => {
            return Err(vec![
                "the probes' motions are linearly dependent: add probes along single components"
                    .into(),
            ])
        }
    };
    let fxt: Matrix6<f64> = &fs * xs.transpose();
    let k_tilde = fxt * xxt_inv;
    let k = d_inv * k_tilde * d_inv;
    let sv = k_tilde.svd(false, false).singular_values;
    let (smax, smin) = (sv.max(), sv.min());
    let condition = if smin > 0.0 {
        smax / smin
    } else {
        f64::INFINITY
    };
    let norm = k_tilde.norm();
    let symmetry_error = if norm > 0.0 {
        (k_tilde - k_tilde.transpose()).norm() / norm
    } else {
        0.0
    };
    let mut sq = [0.0f64; 6];
    for p in probes {
        let predicted = k * Vector6::from_column_slice(&p.dx);
        for (i, s) in sq.iter_mut().enumerate() {
            let e = p.df[i] - predicted[i];
            *s += e * e;
        }
    }
    let residual_rms = sq.map(|s| (s / n as f64).sqrt());
    Ok(KfIdentified {
        k,
        condition,
        symmetry_error,
        residual_rms,
        probes: n,
        length_m,
    })
}

impl KfIdentified {
    /// Eq. 12: the pose increment `Δx = K_f⁻¹·Δf` (m, rad) for the wrench increment `Δf` (N,
    /// N·m); `None` when `K_f` is singular or a value is not finite.
    pub fn increment(&self, df: &[f64; 6]) -> Option<[f64; 6]> {
        let inv = self.k.try_inverse()?;
        let dx = inv * Vector6::from_column_slice(df);
        dx.iter()
            .all(|v| v.is_finite())
            .then(|| std::array::from_fn(|i| dx[i]))
    }
}

/// The probes to command: per pose component, each amplitude of its kind (`amps_m` for x, y, z;
/// `amps_rad` for rx, ry, rz) with both signs — one component at a time, as the seed does.
pub fn probe_plan(amps_m: &[f64], amps_rad: &[f64]) -> Vec<[f64; 6]> {
    let mut plan = Vec::new();
    for axis in 0..6 {
        let amps = if axis < 3 { amps_m } else { amps_rad };
        for a in amps {
            for s in [1.0, -1.0] {
                let mut dx = [0.0; 6];
                dx[axis] = s * a;
                plan.push(dx);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A coupled, symmetric K_f with the seed's pattern (forces along x/y coupled to rotations
    /// about y/x, torque about z to its own rotation), stiffer in translation.
    fn k_true() -> Matrix6<f64> {
        let mut k = Matrix6::zeros();
        k[(0, 0)] = 2.0e5;
        k[(1, 1)] = 1.5e5;
        k[(2, 2)] = 4.0e5;
        k[(3, 3)] = 900.0;
        k[(4, 4)] = 1100.0;
        k[(5, 5)] = 600.0;
        // F_x ↔ rotation about y, F_y ↔ rotation about x (N/rad = N·m/m).
        k[(0, 4)] = 8.0e3;
        k[(4, 0)] = 8.0e3;
        k[(1, 3)] = -6.0e3;
        k[(3, 1)] = -6.0e3;
        k
    }

    fn probes_of(k: &Matrix6<f64>, plan: &[[f64; 6]], noise: f64, seed: u64) -> Vec<Probe> {
        let mut s = seed;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        plan.iter()
            .map(|dx| {
                let f = k * Vector6::from_column_slice(dx);
                Probe {
                    dx: *dx,
                    df: std::array::from_fn(|i| f[i] + noise * rnd()),
                }
            })
            .collect()
    }

    #[test]
    fn the_seeds_single_component_probes_recover_a_coupled_stiffness() {
        let k = k_true();
        let plan = probe_plan(&[0.2e-3, 0.5e-3], &[2e-3, 5e-3]);
        assert_eq!(plan.len(), 24);
        let id = identify(&probes_of(&k, &plan, 0.0, 1), 0.1).expect("identified");
        assert!((id.k - k).norm() <= 1e-9 * k.norm(), "{}", id.k - k);
        assert!(id.symmetry_error < 1e-12, "{}", id.symmetry_error);
        assert!(
            id.residual_rms.iter().all(|r| *r < 1e-9),
            "{:?}",
            id.residual_rms
        );
        assert!(id.condition.is_finite() && id.condition > 1.0);
        // Eq. 12 inverts eq. 11.
        let dx = [1e-4, -2e-4, 3e-4, 1e-3, -2e-3, 5e-4];
        let df = k * Vector6::from_column_slice(&dx);
        let back = id
            .increment(&std::array::from_fn(|i| df[i]))
            .expect("invertible");
        for i in 0..6 {
            assert!((back[i] - dx[i]).abs() < 1e-12, "{back:?} vs {dx:?}");
        }
    }

    #[test]
    fn noise_shows_in_the_residuals_and_a_slipping_fixture_in_the_symmetry() {
        let k = k_true();
        let plan = probe_plan(&[0.2e-3, 0.5e-3, 1e-3], &[2e-3, 5e-3, 1e-2]);
        // 0.05 N / 0.05 N·m uniform noise (±0.025): the fit stays within a few percent.
        let id = identify(&probes_of(&k, &plan, 0.05, 7), 0.1).expect("identified");
        for i in 0..6 {
            let rel = (id.k[(i, i)] - k[(i, i)]).abs() / k[(i, i)];
            assert!(rel < 0.02, "K{i}{i}: {} vs {}", id.k[(i, i)], k[(i, i)]);
            assert!(id.residual_rms[i] > 0.0 && id.residual_rms[i] < 0.03);
        }
        assert!(id.symmetry_error < 0.01, "{}", id.symmetry_error);
        // A coupling seen one way only (the fixture slips under a moment): not symmetric.
        let mut skew = k;
        skew[(4, 0)] = 0.0;
        let id = identify(&probes_of(&skew, &plan, 0.0, 7), 0.1).expect("identified");
        assert!(id.symmetry_error > 0.01, "{}", id.symmetry_error);
    }

    #[test]
    fn every_problem_is_listed() {
        let k = k_true();
        // Nothing moves rz.
        let plan: Vec<[f64; 6]> = probe_plan(&[1e-3], &[1e-2])
            .into_iter()
            .filter(|dx| dx[5] == 0.0)
            .collect();
        let e = identify(&probes_of(&k, &plan, 0.0, 1), 0.1).expect_err("rz unexcited");
        assert_eq!(e, vec!["no probe moves rz".to_string()]);
        let mut bad = probes_of(&k, &probe_plan(&[1e-3], &[1e-2]), 0.0, 1);
        bad[3].df[2] = f64::NAN;
        let e = identify(&bad[..5], -1.0).expect_err("three problems");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].contains("tool length") && e[1].contains("5 probes"));
        assert!(e[2].contains("probe 3"));
        // Two probes along one diagonal direction only: dependent, not per component.
        let diag = [1e-3; 6];
        let dependent: Vec<Probe> = (0..6)
            .map(|i| Probe {
                dx: diag.map(|v| v * (i as f64 + 1.0)),
                df: [0.0; 6],
            })
            .collect();
        let e = identify(&dependent, 0.1).expect_err("dependent");
        assert!(e[0].contains("linearly dependent"), "{e:?}");
    }

    proptest! {
        /// Any invertible K_f and any plan that moves every component: recovered exactly from
        /// noise-free probes, and eq. 12 undoes eq. 11.
        #[test]
        fn any_stiffness_is_recovered_and_inverted(
            diag in proptest::array::uniform6(1e2f64..1e6),
            off in proptest::collection::vec(-0.3f64..0.3, 36),
            amp_m in 1e-5f64..1e-2,
            amp_rad in 1e-4f64..5e-2,
            l in 0.01f64..1.0,
        ) {
            // Diagonally dominant: invertible.
            let mut k = Matrix6::from_diagonal(&Vector6::from_column_slice(&diag));
            for i in 0..6 {
                for j in 0..6 {
                    if i != j {
                        k[(i, j)] = off[i * 6 + j] * (diag[i] * diag[j]).sqrt() / 6.0;
                    }
                }
            }
            let plan = probe_plan(&[amp_m, 2.0 * amp_m], &[amp_rad]);
            let id = identify(&probes_of(&k, &plan, 0.0, 3), l).expect("identified");
            prop_assert!((id.k - k).norm() <= 1e-8 * k.norm());
            let dx = [amp_m, -amp_m, 0.5 * amp_m, amp_rad, -amp_rad, 0.3 * amp_rad];
            let df = k * Vector6::from_column_slice(&dx);
            let back = id.increment(&std::array::from_fn(|i| df[i])).expect("invertible");
            for i in 0..6 {
                prop_assert!((back[i] - dx[i]).abs() <= 1e-6 * dx[i].abs().max(1e-12));
            }
        }
    }
}
