//! Gain rules: the arm's gains from the contact stiffness and loop delay, the plant's
//! defaults.

use common::msg::HybridGains;

/// The arm's force-loop design point `kp_f·K_e·T` (see the module docs).
pub const ARM_LOOP_GAIN_DELAY: f64 = 0.3;

/// The contact stiffness a force gain was designed for, by the same rule (`K_e = c/(kp_f·T)`):
/// a task that brings its own gains gets its approach speed and feedforward from them.
pub fn stiffness_of_gain(kp_f: f64, delay_s: f64) -> Option<f64> {
    (kp_f > 0.0 && delay_s > 0.0).then(|| ARM_LOOP_GAIN_DELAY / (kp_f * delay_s))
}

/// Default gains on the arm for contact stiffness `k_e` (N/m, per translational axis of {C})
/// and effective loop delay `delay_s`. See the module docs for the rule.
pub fn default_arm_gains(k_e: [f64; 3], k_rot: [f64; 3], delay_s: f64) -> HybridGains {
    const C: f64 = ARM_LOOP_GAIN_DELAY;
    const W_I: f64 = 2.0;
    let mut g = HybridGains {
        kp: [5.0; 6],
        ki: [0.0; 6],
        kd: [0.0; 6],
        kp_f: [0.0; 6],
        ki_f: [0.0; 6],
        kd_f: [0.0; 6],
        limit_n: [5.0, 5.0, 5.0, 0.5, 0.5, 0.5],
        feedforward: 1.0,
        friction_n: [0.0; 6],
    };
    for k in 0..6 {
        let ke = if k < 3 { k_e[k] } else { k_rot[k - 3] };
        g.kp_f[k] = C / (ke.max(1.0) * delay_s.max(1e-3));
        g.ki_f[k] = W_I * g.kp_f[k];
    }
    g
}

/// Default gains on the 2-DOF plant (torque-controlled; x, y of {C} only), chosen on the
/// model at 60 Hz (`tests/tests/hybrid_model.rs`, figures in `docs/hybrid.md`):
/// * position (C_y, effective mass ≈ 8 kg across the boom at r = 0.55 m): kp 2000 N/m,
///   ki 500 N/(m·s), kd 150 N·s/m — ≈ 16 rad/s, critically damped;
/// * force: feedforward 0.6·F_d (a full feedforward step rings the 24 Hz boom mode),
///   kp_f 0.1, ki_f 15 s⁻¹ with the limiter at 3 N (breaks the 4 N static friction of a 1 N
///   step in ≈ 0.15 s), kd_f 40 N·s/m active damping, and 1 N of Coulomb-friction
///   feedforward — below the plant's 3 N so that halving the friction does not
///   over-compensate it (at 2 N the halved plant went unstable).
pub fn default_plant_gains() -> HybridGains {
    HybridGains {
        kp: [2000.0, 2000.0, 0.0, 0.0, 0.0, 0.0],
        ki: [500.0, 500.0, 0.0, 0.0, 0.0, 0.0],
        kd: [150.0, 150.0, 0.0, 0.0, 0.0, 0.0],
        kp_f: [0.1, 0.1, 0.0, 0.0, 0.0, 0.0],
        ki_f: [15.0, 15.0, 0.0, 0.0, 0.0, 0.0],
        kd_f: [40.0, 40.0, 0.0, 0.0, 0.0, 0.0],
        limit_n: [3.0, 3.0, 0.0, 0.0, 0.0, 0.0],
        feedforward: 0.6,
        friction_n: [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    }
}

/// The stiffest contact a cell declares it may meet, by default (N/m): steel on steel through
/// a stiff tool (`[control.hybrid] worst_case_stiffness_n_per_m`).
pub const DEFAULT_WORST_CASE_STIFFNESS_N_PER_M: f64 = 1e6;
