//! The cell's operator client over zenoh and its launcher:
//! - [`cli`]: requests, statuses, modes, moves and their ends, as the `cell` commands use them;
//! - [`hybrid`]: running a hybrid task file and recording its outcome;
//! - [`guide`]: `cell guide`'s session, how it ended and its trace;
//! - [`lead`]: lead-through sessions (guide, teach, play);
//! - [`identify`]: contact-stiffness identification on the fixture;
//! - [`launcher`]: `cell up`, the embedded router and every service as a supervised process.
//!
//! The experiments ([`lab`](../lab/index.html)) and the `cell` binary build on it.

pub mod cli;
pub mod guide;
pub mod hybrid;
pub mod identify;
pub mod launcher;
pub mod lead;
