//! Teach program files (in progress).
