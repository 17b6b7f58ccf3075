//! The emulated devices' side of each wire protocol, written here from the specs
//! (`shared/reference/protocols.md`), **not** from the drivers' codecs: the simulator is an
//! independent implementation of what it emulates, so a misread spec shows up as a failing
//! whole-cell test instead of being the same on both sides.
//!
//! - [`egm`]: the IRC5's `EgmRobot` writer and `EgmSensor` reader (protobuf by hand);
//! - [`sri`]: the SRI M812x box's AT command reader, reply writer and `AA 55` frame writer;
//! - [`ati`]: the Net F/T's RDT request reader and record writer.
//!
//! Both sides are held to the same test vectors (`protocols/vectors/*.json`, written by
//! `protocols/vectors/make_vectors.py`, a third writer): the drivers' crates in their tests, these
//! modules in theirs.

pub mod ati;
pub mod egm;
pub mod sri;

#[cfg(test)]
pub(crate) mod vectors {
    #![allow(clippy::unwrap_used)]
    use serde_json::Value;

    pub fn load(name: &str) -> Value {
        let path = format!(
            "{}/../../protocols/vectors/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    pub fn hex(v: &Value) -> Vec<u8> {
        let s = v["hex"].as_str().unwrap();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    pub fn f64s(v: &Value) -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    }

    pub fn six(v: &Value) -> [f64; 6] {
        f64s(v).try_into().unwrap()
    }
}
