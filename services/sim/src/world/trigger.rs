//! Start triggers of scenario events (a surface's ramp motion, the operator's hand).
//!
//! An event's `start_s` counts from its trigger's *origin*:
//!
//! * `trigger = "time"` (the default): the origin is scenario time 0, so `start_s` is an
//!   absolute scenario time (as before triggers existed);
//! * `trigger = "contact"`: the origin is the scenario time of the **first contact after the
//!   trigger was armed**. Before that the event has not begun (a ramp has not moved, the hand
//!   does not hold the tool). Triggers are armed when a scenario is loaded or reset, and on an
//!   explicit re-arm (`{"arm": true}` on the scenario RPC).
//!
//! What counts as "contact" is the owner's business: a surface fires on the tool touching that
//! surface, the hand on the tool touching any surface, the 2-DOF plant's surface on the hand
//! touching it. This is the Raibert & Craig Fig. 8 set-up: make contact, let the force settle
//! for `start_s`, then move the surface away.

use serde::{Deserialize, Serialize};

/// When an event's `start_s` starts counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// From scenario time 0.
    #[default]
    Time,
    /// From the first contact after the trigger was armed.
    Contact,
}

/// A trigger and, once it fired, its origin (scenario time, s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TriggerClock {
    kind: Trigger,
    origin: Option<f64>,
}

/// What a trigger reports (for the scenario summary).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TriggerStatus {
    pub kind: Trigger,
    /// Waiting for its first contact.
    pub armed: bool,
    /// Scenario time the event's clock started at (0 for `time`), once started.
    pub origin_s: Option<f64>,
}

impl TriggerClock {
    /// A freshly armed trigger (`time` starts at once, at scenario time 0).
    pub fn new(kind: Trigger) -> Self {
        Self {
            kind,
            origin: match kind {
                Trigger::Time => Some(0.0),
                Trigger::Contact => None,
            },
        }
    }

    /// The trigger kind.
    pub fn kind(&self) -> Trigger {
        self.kind
    }

    /// Re-arms: a `contact` trigger waits for the next contact again (its event returns to its
    /// not-yet-started state); a `time` trigger is unchanged.
    pub fn arm(&mut self) {
        *self = Self::new(self.kind);
    }

    /// Tells the trigger whether there is contact at scenario time `t`. The first contact of an
    /// armed `contact` trigger fires it (origin = `t`); returns whether it fired now.
    pub fn observe(&mut self, contact: bool, t: f64) -> bool {
        if contact && self.origin.is_none() && t.is_finite() {
            self.origin = Some(t);
            return true;
        }
        false
    }

    /// Whether it waits for its contact.
    pub fn is_armed(&self) -> bool {
        self.origin.is_none()
    }

    /// The origin (scenario time, s) once started.
    pub fn origin(&self) -> Option<f64> {
        self.origin
    }

    /// The event's own time at scenario time `t` (`t − origin`); `None` before it started.
    pub fn local_time(&self, t: f64) -> Option<f64> {
        self.origin.map(|o| t - o)
    }

    /// Carries the state of `old` over when the kind is unchanged (a live parameter change must
    /// not restart a running event); otherwise a fresh trigger of the new kind.
    pub fn carried_from(kind: Trigger, old: Option<&TriggerClock>) -> Self {
        match old {
            Some(o) if o.kind == kind => *o,
            _ => Self::new(kind),
        }
    }

    /// Status for reports.
    pub fn status(&self) -> TriggerStatus {
        TriggerStatus {
            kind: self.kind,
            armed: self.is_armed(),
            origin_s: self.origin,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_trigger_counts_from_zero() {
        let mut c = TriggerClock::new(Trigger::Time);
        assert!(!c.is_armed());
        assert_eq!(c.local_time(1.5), Some(1.5));
        assert!(
            !c.observe(true, 0.7),
            "contact does not move a time trigger"
        );
        assert_eq!(c.local_time(1.5), Some(1.5));
        c.arm();
        assert_eq!(c.local_time(2.0), Some(2.0));
    }

    #[test]
    fn contact_trigger_fires_on_first_contact_only() {
        let mut c = TriggerClock::new(Trigger::Contact);
        assert!(c.is_armed());
        assert_eq!(c.local_time(3.0), None);
        assert!(!c.observe(false, 1.0));
        assert!(c.observe(true, 1.25));
        assert_eq!(c.origin(), Some(1.25));
        // Later contacts (or losing contact) do not move the origin.
        assert!(!c.observe(false, 2.0));
        assert!(!c.observe(true, 3.0));
        assert_eq!(c.local_time(3.25), Some(2.0));
        // Re-armed: waits again.
        c.arm();
        assert!(c.is_armed() && c.local_time(5.0).is_none());
        assert!(c.observe(true, 6.0));
        assert_eq!(c.local_time(6.5), Some(0.5));
        // A non-finite time never fires it.
        let mut d = TriggerClock::new(Trigger::Contact);
        assert!(!d.observe(true, f64::NAN));
        assert!(d.is_armed());
    }

    #[test]
    fn carried_over_only_for_the_same_kind() {
        let mut c = TriggerClock::new(Trigger::Contact);
        c.observe(true, 0.5);
        assert_eq!(
            TriggerClock::carried_from(Trigger::Contact, Some(&c)).origin(),
            Some(0.5)
        );
        assert_eq!(
            TriggerClock::carried_from(Trigger::Time, Some(&c)).origin(),
            Some(0.0)
        );
        assert!(TriggerClock::carried_from(Trigger::Contact, None).is_armed());
        let s = c.status();
        assert_eq!(s.kind, Trigger::Contact);
        assert!(!s.armed && s.origin_s == Some(0.5));
    }
}
