//! The lead-through session's deadman and teach buffer as the core keeps them (issue 42: both
//! lived in the shell, the deadman on the host's wall clock and with the cell's timeout even
//! when the session had tightened it, the dwell rule with the cell's settings even when the
//! session had its own). A guide request binds a fresh token ([`ControlCore::request_guide`]); enables with it
//! keep the deadman ([`ControlCore::on_enable`]); every step decides on robot time whether it
//! is held, with the session's own `deadman_timeout_s`.

use common::msg::Mode;
use nalgebra::Isometry3;

use super::{ControlCore, Next};
use crate::deadman::DeadmanCounts;
use crate::guide::GuideParams;
use crate::teach::{DwellRule, TeachBuffer};

impl ControlCore {
    /// An enable (`control/enable/<identity>`) with `token`: whether it keeps this session's
    /// deadman.
    pub fn on_enable(&mut self, token: u64, identity: &str) -> bool {
        self.deadman_binding.on_enable(token, identity)
    }

    /// A guide session is bound (its token keeps the deadman).
    pub fn deadman_bound(&self) -> bool {
        self.deadman_binding.bound()
    }

    /// The binding's counters.
    pub fn deadman_counts(&self) -> DeadmanCounts {
        self.deadman_binding.counts()
    }

    /// The guide session's deadman timeout (s): the running session's, else the one queued
    /// behind an ending, else the default.
    fn deadman_timeout_s(&self) -> f64 {
        let queued = match &self.ending {
            Some((_, Some(Next::Guide(p)))) => Some(p.deadman_timeout_s),
            _ => None,
        };
        self.guide
            .as_ref()
            .map(|g| g.params.deadman_timeout_s)
            .or(self.pending_guide.map(|p| p.deadman_timeout_s))
            .or(queued)
            .unwrap_or(GuideParams::default().deadman_timeout_s)
    }

    /// The deadman at the step at robot time `now_s`: the binding ends with the session (a
    /// session queued behind an ending keeps it); held while an accepted enable is within the
    /// session's timeout.
    pub(super) fn update_deadman(&mut self, now_s: f64) {
        if self.mode != Mode::LeadThrough && !self.guide_queued() && self.deadman_binding.bound() {
            self.deadman_binding.unbind();
        }
        let timeout = self.deadman_timeout_s();
        self.deadman_held = self.deadman_binding.held(now_s, timeout);
    }

    /// The teach buffer (the waypoints recorded by request or on dwell).
    pub fn teach(&self) -> &TeachBuffer {
        &self.teach
    }

    /// The teach buffer, to record, undo, clear or load.
    pub fn teach_mut(&mut self) -> &mut TeachBuffer {
        &mut self.teach
    }

    /// The measured joints (rad) and TCP speed (m/s) of the next step: what the dwell rule
    /// records and watches.
    pub fn set_measured(&mut self, q_rad: [f64; 6], tcp_speed_m_s: f64) {
        self.measured = Some((q_rad, tcp_speed_m_s));
    }

    /// The waypoint the last step recorded on dwell (its index), said once.
    pub fn take_dwell_waypoint(&mut self) -> Option<usize> {
        self.dwell_recorded.take()
    }

    /// After a step at `now_s` that guided from start to end (`before` and now in
    /// lead-through): the session's dwell rule (`dwell_record_s`; none: no recording on
    /// dwell) on the measured pose `tcp`.
    pub(super) fn observe_dwell(&mut self, before: Mode, tcp: &Isometry3<f64>, now_s: f64) {
        if before != Mode::LeadThrough || self.mode != Mode::LeadThrough {
            return;
        }
        let (Some(g), Some((q, speed))) = (self.guide.as_ref(), self.measured) else {
            return;
        };
        let Some(dwell_s) = g.params.dwell_record_s else {
            return;
        };
        let rule = DwellRule {
            dwell_s,
            speed_m_s: g.params.dwell_speed_m_s,
            min_distance_m: g.params.dwell_min_distance_m,
        };
        if let Some(i) = self.teach.observe_dwell(&rule, q, *tcp, speed, now_s) {
            self.dwell_recorded = Some(i);
        }
    }
}
