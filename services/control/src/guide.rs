//! Hand-guiding laws (in progress).
