//! `cell`: the launcher/supervisor ([`launcher`]), the operator CLI over zenoh ([`cli`]) and
//! offline kinematics commands ([`kin`]).

pub mod bench;
pub mod cli;
pub mod commission;
pub mod demo;
pub mod experiment;
pub mod hybrid;
pub mod identify;
pub mod inproc;
pub mod launcher;
pub mod lead;
pub mod leadexp;
pub mod peg;
pub mod plot;
pub mod stall;
