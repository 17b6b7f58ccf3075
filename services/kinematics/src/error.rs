//! Error type of the kinematics library.

/// Errors returned by the kinematics functions. No function of this crate panics; every
/// failure is reported through this type (or through flags on a successful result).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KinError {
    /// An input contained NaN/∞ or was otherwise malformed (e.g. `dt <= 0`). The string names
    /// the offending argument.
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    /// No IK branch reaches the pose (outside the workspace).
    #[error("pose unreachable")]
    Unreachable,
    /// The pose is reachable, but no branch (with any ±2π variant) lies within the joint limits.
    #[error("no IK solution within joint limits")]
    OutOfLimits,
    /// Parameter validation failed; every problem is listed, each naming its field.
    #[error("invalid parameters: {}", .0.join("; "))]
    InvalidParams(Vec<String>),
    /// A numerical decomposition failed (not expected for finite input).
    #[error("numerical failure: {0}")]
    Numerical(&'static str),
}

/// Returns `Err(InvalidInput(name))` unless every value is finite.
pub(crate) fn check_finite(values: &[f64], name: &'static str) -> Result<(), KinError> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(KinError::InvalidInput(name))
    }
}
