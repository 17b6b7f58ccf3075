//! The lead-through session's deadman as the core keeps it (issue 42: it lived in the shell,
//! on the host's wall clock, and with the cell's timeout even when the session had tightened
//! it). A guide request binds a fresh token ([`ControlCore::request_guide`]); enables with it
//! keep the deadman ([`ControlCore::on_enable`]); every step decides on robot time whether it
//! is held, with the session's own `deadman_timeout_s`.

use common::msg::Mode;

use super::{ControlCore, Next};
use crate::deadman::DeadmanCounts;
use crate::guide::GuideParams;

impl ControlCore {
    /// An enable (`control/enable`) with `token`: whether it keeps this session's deadman.
    pub fn on_enable(&mut self, token: u64) -> bool {
        self.deadman_binding.on_enable(token)
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
}
