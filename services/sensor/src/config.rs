//! The `[sensor]` table and its device sub-tables.
//!
//! ```toml
//! [sensor]
//! driver = "sri"                  # none | sri | ati
//! connect_timeout_ms = 1000
//! data_timeout_ms = 100           # silence longer than this = device lost → reconnect
//! reconnect_min_ms = 50           # back-off, doubling up to reconnect_max_ms
//! reconnect_max_ms = 2000
//!
//! [sensor.sri]
//! address = "192.168.0.108:4008"
//! mode = "raw_counts"             # raw_counts (SGDM C) | calibrated (SGDM E)
//! sample_rate_hz = 1000           # AT+SMPR
//! torque_scale = 1.0              # × box torque units → N·m (0.001 for a N·mm matrix)
//! reply_timeout_ms = 1000
//! set_check_mode = true           # send AT+DCKMD=SUM (a missing ACK is tolerated)
//! # [sensor.sri.params]           # optional: else AMPZ/CHNAPG/EXMV/DCPM are queried
//! # amp_zero = [..6], gain = [..6], excitation_v = [..6], decoupling = [[..6] x6]
//!
//! [sensor.ati]
//! address = "192.168.1.1:49152"
//! http_port = 80                  # netftapi2.xml, read when a counts_per_* is absent
//! # counts_per_force = 1000000.0  # counts per N
//! # counts_per_torque = 1000000.0 # counts per N·m
//! sample_rate_hz = 1000           # the RDT rate set on the device (status only)
//! ```

use common::config::{check_range, ConfigErrors, Validate};
use serde::{Deserialize, Serialize};

use crate::sri::{DataFormat, SriParams};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SensorDriver {
    /// No F/T sensor in this cell.
    #[default]
    None,
    /// SRI M8128 interface box over TCP (`[sensor.sri]`).
    Sri,
    /// ATI Net F/T, RDT over UDP (`[sensor.ati]`).
    Ati,
}

/// `[sensor]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SensorConfig {
    pub driver: SensorDriver,
    pub connect_timeout_ms: u64,
    pub data_timeout_ms: u64,
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
    pub sri: SriConfig,
    pub ati: AtiConfig,
}

impl Default for SensorConfig {
    fn default() -> Self {
        Self {
            driver: SensorDriver::None,
            connect_timeout_ms: 1000,
            data_timeout_ms: 100,
            reconnect_min_ms: 50,
            reconnect_max_ms: 2000,
            sri: SriConfig::default(),
            ati: AtiConfig::default(),
        }
    }
}

/// `[sensor.sri]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SriConfig {
    pub address: String,
    pub mode: DataFormat,
    pub sample_rate_hz: u32,
    pub torque_scale: f64,
    pub reply_timeout_ms: u64,
    pub set_check_mode: bool,
    pub params: Option<SriParams>,
}

impl Default for SriConfig {
    fn default() -> Self {
        Self {
            address: format!("192.168.0.108:{}", crate::sri::DEFAULT_PORT),
            mode: DataFormat::RawCounts,
            sample_rate_hz: 1000,
            torque_scale: 1.0,
            reply_timeout_ms: 1000,
            set_check_mode: true,
            params: None,
        }
    }
}

/// `[sensor.ati]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AtiConfig {
    pub address: String,
    pub http_port: u16,
    pub counts_per_force: Option<f64>,
    pub counts_per_torque: Option<f64>,
    pub sample_rate_hz: f64,
}

impl Default for AtiConfig {
    fn default() -> Self {
        Self {
            address: format!("192.168.1.1:{}", crate::ati::RDT_PORT),
            http_port: 80,
            counts_per_force: None,
            counts_per_torque: None,
            sample_rate_hz: 1000.0,
        }
    }
}

/// `host:port` with a non-empty host and a port in 1..=65535.
pub fn check_address(errors: &mut ConfigErrors, key: String, addr: &str) {
    let ok = addr
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
    if !ok {
        errors.push(key, format!("{addr:?} is not host:port"));
    }
}

fn check_ms(errors: &mut ConfigErrors, key: String, v: u64, min: u64, max: u64) {
    if v < min || v > max {
        errors.push(key, format!("{v} out of range [{min}, {max}] ms"));
    }
}

impl Validate for SensorConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        check_ms(
            errors,
            format!("{prefix}.connect_timeout_ms"),
            self.connect_timeout_ms,
            1,
            60_000,
        );
        check_ms(
            errors,
            format!("{prefix}.data_timeout_ms"),
            self.data_timeout_ms,
            1,
            60_000,
        );
        check_ms(
            errors,
            format!("{prefix}.reconnect_min_ms"),
            self.reconnect_min_ms,
            1,
            60_000,
        );
        check_ms(
            errors,
            format!("{prefix}.reconnect_max_ms"),
            self.reconnect_max_ms,
            1,
            600_000,
        );
        if self.reconnect_max_ms < self.reconnect_min_ms {
            errors.push(
                format!("{prefix}.reconnect_max_ms"),
                format!(
                    "{} is below reconnect_min_ms ({})",
                    self.reconnect_max_ms, self.reconnect_min_ms
                ),
            );
        }
        self.sri.validate(&format!("{prefix}.sri"), errors);
        self.ati.validate(&format!("{prefix}.ati"), errors);
    }
}

impl Validate for SriConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        check_address(errors, format!("{prefix}.address"), &self.address);
        if !(1..=10_000).contains(&self.sample_rate_hz) {
            errors.push(
                format!("{prefix}.sample_rate_hz"),
                format!("{} out of range [1, 10000] Hz", self.sample_rate_hz),
            );
        }
        if !(self.torque_scale.is_finite() && self.torque_scale > 0.0) {
            errors.push(format!("{prefix}.torque_scale"), "must be finite and > 0");
        }
        check_ms(
            errors,
            format!("{prefix}.reply_timeout_ms"),
            self.reply_timeout_ms,
            1,
            60_000,
        );
        if let Some(p) = &self.params {
            for (key, problem) in p.problems(&format!("{prefix}.params")) {
                errors.push(key, problem);
            }
        }
    }
}

impl Validate for AtiConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        check_address(errors, format!("{prefix}.address"), &self.address);
        if self.http_port == 0 {
            errors.push(format!("{prefix}.http_port"), "must be 1..65535");
        }
        for (name, v) in [
            ("counts_per_force", self.counts_per_force),
            ("counts_per_torque", self.counts_per_torque),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    errors.push(format!("{prefix}.{name}"), format!("{v} must be > 0"));
                }
            }
        }
        check_range(
            errors,
            format!("{prefix}.sample_rate_hz"),
            self.sample_rate_hz,
            1.0,
            7000.0,
            "Hz",
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use common::config::RawConfig;

    fn load(text: &str) -> (SensorConfig, ConfigErrors) {
        let raw = RawConfig::from_toml_str(text).unwrap();
        let mut errors = ConfigErrors::default();
        let c: SensorConfig = raw.section("sensor", &mut errors);
        (c, errors)
    }

    #[test]
    fn defaults_are_valid_and_none() {
        let (c, e) = load("");
        assert!(e.is_empty(), "{e}");
        assert_eq!(c.driver, SensorDriver::None);
        assert_eq!(c.sri.address, "192.168.0.108:4008");
        assert_eq!(c.ati.address, "192.168.1.1:49152");
    }

    #[test]
    fn sri_table_with_params() {
        let (c, e) = load(
            "[sensor]\ndriver = \"sri\"\n[sensor.sri]\naddress = \"10.0.0.2:4008\"\nmode = \"calibrated\"\n\
             [sensor.sri.params]\namp_zero = [32768,32768,32768,32768,32768,32768]\n\
             gain = [124,124,124,124,124,124]\nexcitation_v = [5,5,5,5,5,5]\n\
             decoupling = [[1,0,0,0,0,0],[0,1,0,0,0,0],[0,0,1,0,0,0],[0,0,0,1,0,0],[0,0,0,0,1,0],[0,0,0,0,0,1]]\n",
        );
        assert!(e.is_empty(), "{e}");
        assert_eq!(c.driver, SensorDriver::Sri);
        assert_eq!(c.sri.mode, DataFormat::Calibrated);
        assert_eq!(c.sri.params.unwrap().gain[0], 124.0);
    }

    #[test]
    fn every_problem_is_named() {
        let (_, e) = load(
            "[sensor]\ndriver = \"ati\"\nreconnect_min_ms = 500\nreconnect_max_ms = 100\n\
             [sensor.sri]\naddress = \"nohost\"\nsample_rate_hz = 0\ntorque_scale = -1.0\nbogus = 1\n\
             [sensor.sri.params]\namp_zero = [1,2,3,4,5,70000]\ngain = [0,1,1,1,1,1]\n\
             excitation_v = [5,5,5,5,5,5]\ndecoupling = [[1,0,0,0,0,0],[0,1,0,0,0,0],[0,0,1,0,0,0],[0,0,0,1,0,0],[0,0,0,0,1,0],[0,0,0,0,0,1]]\n\
             [sensor.ati]\naddress = \":49152\"\ncounts_per_force = 0.0\nsample_rate_hz = 9000.0\n",
        );
        let keys: Vec<&str> = e.0.iter().map(|i| i.key.as_str()).collect();
        for k in [
            "sensor.reconnect_max_ms",
            "sensor.sri.address",
            "sensor.sri.sample_rate_hz",
            "sensor.sri.torque_scale",
            "sensor.sri.bogus",
            "sensor.sri.params.amp_zero[5]",
            "sensor.sri.params.gain[0]",
            "sensor.ati.address",
            "sensor.ati.counts_per_force",
            "sensor.ati.sample_rate_hz",
        ] {
            assert!(keys.contains(&k), "{k} missing in {keys:?}");
        }
    }
}
