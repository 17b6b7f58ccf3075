//! A guide session's record (`cell guide --trace`): control's guide states from the request
//! to [`AFTER_END_S`] after the end (`guide.csv`, timed from the end: negative before it), and
//! the force service's estimate and the simulator's truth over that second (`after_end.csv`).
//! The session itself (the request, the enable, how it ended) is `client::guide::run`'s; its
//! figures are `crate::score::lead::guide_metrics`.

use std::{io::Write, path::Path};

use anyhow::Context;
use client::guide::GuideRun;

use super::{trace_after_end, write_after_end, AfterRow, AFTER_END_S};

/// A recorded session.
pub struct GuideTrace {
    /// The session, its guide states now through [`AFTER_END_S`] after the end.
    pub session: GuideRun,
    /// The estimate and the truth over [`AFTER_END_S`] after the end.
    pub after: Vec<AfterRow>,
}

/// Records the second after the session's end from the rings `client::guide::run` kept open
/// (nothing when it kept none: no trace was asked).
pub async fn finish(mut run: GuideRun) -> GuideTrace {
    let mut after = Vec::new();
    if let Some(rings) = run.rings.take() {
        after = trace_after_end(&rings.world, &rings.estimates, run.end_mono_ns).await;
        client::guide::drain_states(&rings.states, &mut run.states);
        let (first_ns, last_ns) = (
            run.requested_ns,
            run.end_mono_ns + (AFTER_END_S * 1e9) as u64,
        );
        run.states
            .retain(|g| (first_ns..=last_ns).contains(&g.stamp.source_mono_ns));
    }
    GuideTrace {
        session: run,
        after,
    }
}

impl GuideTrace {
    /// Writes `guide.csv` (control's guide states, timed from the end: negative before it) and
    /// `after_end.csv` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let run = &self.session;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("guide.csv");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        writeln!(
            f,
            "t_from_end_s,t_s,motion_id,enabled,force_x_n,force_y_n,force_z_n,torque_x_nm,\
             torque_y_nm,torque_z_nm,v_x_m_s,v_y_m_s,v_z_m_s,w_x_rad_s,w_y_rad_s,w_z_rad_s,\
             tcp_cmd_x_m,tcp_cmd_y_m,tcp_cmd_z_m,damping_scale,speed_limited,wall_limited,steps"
        )?;
        for g in &run.states {
            let t = (g.stamp.source_mono_ns as f64 - run.end_mono_ns as f64) * 1e-9;
            let mut v = vec![
                format!("{t:.6}"),
                format!("{:.6}", g.t_s),
                g.motion_id.to_string(),
                u8::from(g.enabled).to_string(),
            ];
            for a in [
                g.force_n,
                g.torque_nm,
                g.twist.linear_m_s,
                g.twist.angular_rad_s,
            ] {
                v.extend(a.iter().map(|x| format!("{x:.5}")));
            }
            v.extend(g.tcp_cmd_m.iter().map(|x| format!("{x:.7}")));
            v.push(format!("{:.3}", g.damping_scale));
            v.push(u8::from(g.speed_limited).to_string());
            v.push(u8::from(g.wall_limited).to_string());
            v.push(g.steps.to_string());
            writeln!(f, "{}", v.join(","))?;
        }
        f.flush()?;
        write_after_end(&dir.join("after_end.csv"), &self.after)?;
        Ok(())
    }
}
