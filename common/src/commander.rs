//! One commander at a time (pure). robot-io keeps only the newest joint command, so two
//! publishers streaming `kin/joint_cmd` would interleave their references. Every commander
//! (control on the direct chain, the kinematics service's servo for Cartesian clients) also
//! subscribes to `kin/joint_cmd` and applies [`other_commander`] before it sends: the one
//! already streaming keeps the robot; the other refuses (control goes idle with the reason,
//! kinematics refuses the Cartesian command), until the stream has been quiet for
//! [`OTHER_COMMANDER_WINDOW_S`]. robot-io's supervisor still limits every step either way.

/// A commander that is not this one streamed a joint command within this time (s): the
/// robot has another commander (robot-io keeps only the newest joint command, so two
/// streams would interleave).
pub const OTHER_COMMANDER_WINDOW_S: f64 = 0.02;

/// Motion ids a commander remembers as its own.
pub const OWN_MOTIONS: usize = 8;

/// One rule for who commands the robot: the commander already streaming keeps it. `own` are
/// this commander's recent motion ids; `seen` the newest joint command on the bus (its
/// motion id and arrival, ns); `now_ns` now. `Some(why)` when another commander streams.
pub fn other_commander(own: &[u64], seen: Option<(u64, u64)>, now_ns: u64) -> Option<String> {
    let (motion, at_ns) = seen?;
    let fresh = now_ns.saturating_sub(at_ns) as f64 * 1e-9 <= OTHER_COMMANDER_WINDOW_S;
    (fresh && motion != 0 && !own.contains(&motion)).then(|| {
        format!(
            "another commander streams joint commands (motion {motion}): one commander at a time"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streaming_commander_keeps_the_robot() {
        let own = [7, 5, 0, 0, 0, 0, 0, 0];
        // Our own stream, or nothing: free.
        assert_eq!(other_commander(&own, None, 1_000_000_000), None);
        assert_eq!(
            other_commander(&own, Some((5, 999_000_000)), 1_000_000_000),
            None
        );
        // Another motion 5 ms ago: taken.
        let why = other_commander(&own, Some((9, 995_000_000)), 1_000_000_000);
        assert!(why.is_some_and(|w| w.contains("motion 9")));
        // Quiet for longer than the window: free again.
        assert_eq!(
            other_commander(&own, Some((9, 900_000_000)), 1_000_000_000),
            None
        );
        // A command without a motion (id 0) is no stream.
        assert_eq!(
            other_commander(&own, Some((0, 999_000_000)), 1_000_000_000),
            None
        );
    }
}
