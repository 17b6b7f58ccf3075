//! Inputs found by the `bus_codec` fuzz target (`fuzz/regressions/bus_codec/`, see
//! fuzz/README.md): bus payloads that decode to a message with a NaN or an infinity in a field
//! its `Check` did not look at, so the bus delivered them (a NaN `PlantState::t_s` aborted a
//! running plant task in control instead of being dropped). Every non-finite value must fail
//! the check, so the bus counts the message as rejected and drops it.

use common::{
    bus::decode_checked,
    codec::{decode, encode},
    msg::{Check, HybridState, PlantState, SimTruth, ToolPose},
};
use serde::{de::DeserializeOwned, Serialize};

/// A fuzz input: the target's type selector byte, then the bus payload.
fn payload(input: &[u8]) -> &[u8] {
    &input[1..]
}

/// The payload decodes (the check is what must refuse it) and the bus refuses it.
fn refused<T: DeserializeOwned + Check + std::fmt::Debug>(input: &[u8]) {
    let m: T = decode(payload(input)).expect("the regression input decodes");
    assert!(m.check().is_err(), "passes its check: {m:?}");
    assert!(decode_checked::<T>(payload(input)).is_err());
}

macro_rules! input {
    ($name:literal) => {
        include_bytes!(concat!("../../fuzz/regressions/bus_codec/", $name)).as_slice()
    };
}

#[test]
fn plant_states_with_non_finite_fields_are_refused() {
    for input in [
        input!("plant_state_nan_t_s"),
        input!("plant_state_nan_hand_pos_m"),
        input!("plant_state_nan_contact_force_n"),
        input!("plant_state_nan_effort_applied"),
    ] {
        refused::<PlantState>(input);
    }
}

#[test]
fn hybrid_states_with_non_finite_fields_are_refused() {
    refused::<HybridState>(input!("hybrid_state_nan_t_s"));
    refused::<HybridState>(input!("hybrid_state_nan_frame_in_base"));
}

#[test]
fn sim_truth_with_a_non_finite_time_is_refused() {
    refused::<SimTruth>(input!("sim_truth_nan_t_s"));
}

/// Encodes `m`, and asserts the bus refuses the payload.
fn refused_on_the_bus<T: Serialize + DeserializeOwned + Check + std::fmt::Debug>(m: &T) {
    let bytes = encode(m).expect("encodes");
    assert!(decode_checked::<T>(&bytes).is_err(), "accepted: {m:?}");
}

/// The other fields the fix covers, one at a time (the fuzzer reaches them too).
#[test]
fn every_newly_checked_field_refuses_nan_and_infinity() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        refused_on_the_bus(&ToolPose {
            manipulability: bad,
            ..Default::default()
        });
        refused_on_the_bus(&HybridState {
            clock_s: bad,
            ..Default::default()
        });
        let mut h = HybridState::default();
        h.frame_in_base.quat_wxyz[0] = bad;
        refused_on_the_bus(&h);
        refused_on_the_bus(&SimTruth {
            t_s: bad,
            ..Default::default()
        });
        refused_on_the_bus(&PlantState {
            t_s: bad,
            ..Default::default()
        });
    }
    // The defaults themselves pass.
    assert!(ToolPose::default().check().is_ok());
    assert!(HybridState::default().check().is_ok());
    assert!(SimTruth::default().check().is_ok());
    assert!(PlantState::default().check().is_ok());
}
