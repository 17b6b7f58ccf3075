//! The cell's operator client over zenoh (it records; `lab::score` scores, and the launcher,
//! `cell up`, is the `cell` crate's):
//! - [`cli`]: requests, statuses, modes, moves and their ends, as the `cell` commands use them;
//! - [`hybrid`]: running a hybrid task file and recording its outcome;
//! - [`guide`]: `cell guide`'s session, how it ended and its trace;
//! - [`lead`]: lead-through sessions (guide, teach, play);
//! - [`identify`]: contact-stiffness identification on the fixture;
//! - [`record`], [`replay`]: the bus into MCAP files and back;
//!
//! The experiments ([`lab`](../lab/index.html)) and the `cell` binary build on it.

pub mod cli;
pub mod guide;
pub mod hybrid;
pub mod identify;
pub mod lead;
pub mod record;
pub mod replay;
