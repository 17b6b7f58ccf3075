//! The deadman binding of a lead-through session (pure: time is a parameter).
//!
//! A guide request (`control/rpc/lead`, `{"guide": {"operator": ID, …}}`) binds the session to a
//! fresh token, returned in its reply as `enable_token`, and to the requester's identity. Only
//! enables on that identity's key (`control/enable/<ID>`) carrying that token keep the
//! session's deadman fresh; any other (no token, an old session's, another client's)
//! is ignored and counted. Once the deadman has been held and then times out (released), the
//! token is void: the arm brakes and holds, and a new enable — even with the old token — does
//! not resume it. Guiding resumes only by a new guide request, which binds a new token.
//!
//! Time is the robot's (control's core steps on it, issue 42; it was the host's wall clock): an
//! accepted enable counts at the robot time of the next step, at most one robot cycle after it
//! arrived, so the timeout is measured on the clock the motion runs on.

/// Counters of the binding, for `cell status control`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadmanCounts {
    /// Enables with the session's token.
    pub accepted: u64,
    /// Enables with no, an old or another token (or while no session is bound).
    pub ignored: u64,
    /// Sessions whose deadman was held and then released (timed out).
    pub released: u64,
}

/// One lead-through session's deadman: the token it is bound to and the last enable's time.
#[derive(Debug, Clone, Default)]
pub struct Deadman {
    token: Option<u64>,
    /// The identity the session is bound to: only enables from its key
    /// (`control/enable/<identity>`, `""` = the plain key) count.
    identity: String,
    last_s: Option<f64>,
    /// An accepted enable arrived since the last step (it counts at that step's time).
    fresh: bool,
    counts: DeadmanCounts,
}

impl Deadman {
    /// Binds a new session to `token` (never 0, which marks an enable without a token); the
    /// previous session's token stops counting.
    pub fn bind(&mut self, token: u64, identity: &str) {
        self.token = (token != 0).then_some(token);
        self.identity = identity.to_string();
        self.last_s = None;
        self.fresh = false;
    }

    /// Ends the binding (the session left lead-through): every enable is ignored until a new
    /// guide request binds again.
    pub fn unbind(&mut self) {
        self.token = None;
        self.last_s = None;
        self.fresh = false;
    }

    /// An enable with `token` arrived from `identity` (the sender's chunk of its key, which
    /// access control lets only that identity publish); whether it keeps the deadman (it counts
    /// at the next step's time, [`Self::held`]). The right token from another identity is
    /// ignored: a token learnt elsewhere is not enough.
    pub fn on_enable(&mut self, token: u64, identity: &str) -> bool {
        if self.token.is_some_and(|t| t == token) && self.identity == identity {
            self.fresh = true;
            self.counts.accepted += 1;
            true
        } else {
            self.counts.ignored += 1;
            false
        }
    }

    /// The step at robot time `now_s`: whether the deadman is held (an accepted enable within
    /// `timeout_s`; one that arrived since the last step counts now). A held deadman that
    /// times out is released: the binding ends here.
    pub fn held(&mut self, now_s: f64, timeout_s: f64) -> bool {
        if std::mem::take(&mut self.fresh) {
            self.last_s = Some(now_s);
        }
        match self.last_s {
            Some(t) if now_s - t <= timeout_s => true,
            Some(_) => {
                self.unbind();
                self.counts.released += 1;
                false
            }
            None => false,
        }
    }

    pub fn bound(&self) -> bool {
        self.token.is_some()
    }

    pub fn counts(&self) -> DeadmanCounts {
        self.counts
    }
}

/// A session token from a seed (e.g. the monotonic clock, the process id and a counter):
/// splitmix64, never 0.
pub fn token_from(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT_S: f64 = 0.5;

    #[test]
    fn only_the_sessions_token_holds_the_deadman() {
        let mut d = Deadman::default();
        // No session: nothing holds.
        assert!(!d.on_enable(7, "op"));
        d.bind(42, "op");
        assert!(!d.held(0.0, TIMEOUT_S), "held before any enable");
        // Another client's stream (no token, a wrong one) keeps nothing.
        assert!(!d.on_enable(0, "op"));
        assert!(!d.on_enable(41, "op"));
        assert!(!d.held(0.2, TIMEOUT_S));
        assert!(d.on_enable(42, "op"));
        assert!(d.held(0.3, TIMEOUT_S));
        assert!(
            d.held(0.8, TIMEOUT_S),
            "within the timeout of the step it counted at"
        );
        assert_eq!(
            d.counts(),
            DeadmanCounts {
                accepted: 1,
                ignored: 3,
                released: 0
            }
        );
    }

    /// Robot time: an enable counts at the step after it, and the timeout runs from there.
    #[test]
    fn a_release_voids_the_token_until_a_new_guide_request() {
        let mut d = Deadman::default();
        d.bind(42, "op");
        for k in 0..10 {
            assert!(d.on_enable(42, "op"));
            assert!(d.held(0.05 * k as f64, TIMEOUT_S));
        }
        // The last enable counted at 0.45 s: held up to 0.95 s, released after.
        assert!(d.held(0.94, TIMEOUT_S));
        assert!(!d.held(0.96, TIMEOUT_S));
        assert!(!d.bound());
        assert_eq!(d.counts().released, 1);
        // The same stream coming back does not resume the session.
        assert!(!d.on_enable(42, "op"));
        assert!(!d.held(1.0, TIMEOUT_S));
        // A new guide request binds a new token, which holds.
        d.bind(43, "op");
        assert!(!d.on_enable(42, "op"));
        assert!(d.on_enable(43, "op"));
        assert!(d.held(1.2, TIMEOUT_S));
    }

    #[test]
    fn a_new_session_drops_the_old_one_and_zero_is_never_a_token() {
        let mut d = Deadman::default();
        d.bind(5, "op");
        assert!(d.on_enable(5, "op"));
        d.bind(6, "op");
        assert!(
            !d.held(0.1, TIMEOUT_S),
            "the old session's enable carries over"
        );
        assert!(!d.on_enable(5, "op"));
        d.bind(0, "op");
        assert!(!d.bound());
        assert!(!d.on_enable(0, "op"));
        let tokens: std::collections::HashSet<u64> = (0..1000).map(token_from).collect();
        assert_eq!(tokens.len(), 1000);
        assert!(!tokens.contains(&0));
    }

    #[test]
    fn an_enable_needs_the_token_and_the_identity() {
        let mut d = Deadman::default();
        d.bind(42, "operator-a");
        // The right token from another identity's key (learnt over a shoulder): ignored.
        assert!(!d.on_enable(42, "operator-b"));
        assert!(!d.on_enable(42, ""));
        assert!(!d.held(0.1, TIMEOUT_S));
        assert_eq!(d.counts().ignored, 2);
        assert!(d.on_enable(42, "operator-a"));
        assert!(d.held(0.2, TIMEOUT_S));
        // A client that names no identity binds the plain key, and only that.
        d.bind(43, "");
        assert!(!d.on_enable(43, "operator-a"));
        assert!(d.on_enable(43, ""));
    }
}
