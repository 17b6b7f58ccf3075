//! ft: the F/T sensors' wire protocols, pure (no I/O, no clocks, no bus).
//!
//! - [`sri`]: SRI M812x interface box (M8128): AT commands and replies, binary `E`/`C` frames,
//!   the `C`-mode conversion (protocols.md §3);
//! - [`ati`]: ATI Net F/T RDT over UDP: requests, 36-byte records, the `netftapi2.xml`
//!   configuration page and its units (protocols.md §2);
//! - [`seq`]: sequence-number tracking (gaps, reorders, restarts) shared by both.
//!
//! The drivers in `sensor` use these; the simulator's device emulators do **not**: they write
//! their bytes with their own encoders from the same spec, and both sides are held to the test
//! vectors in `protocols/vectors/` (a misread spec cannot be the same on both sides).

pub mod ati;
pub mod seq;
pub mod sri;
