//! The cell config's `[arm]` table: which arm, which tool, where the sensor sits.
//! Shared by every service that needs the arm model (kinematics, robot-io, control, force, sim).

use serde::{Deserialize, Serialize};

use crate::{Arm, ArmParams, FrameParams, JointLimits, OpwParams};

/// Arm presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArmModel {
    /// ABB IRB 120-3/0.58.
    #[default]
    Irb120,
    /// ABB IRB 120T (faster wrist).
    Irb120t,
    /// Any OPW arm: `opw` and `limits` must be given.
    Custom,
}

/// `[arm]`: model preset plus overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ArmSection {
    pub model: ArmModel,
    /// OPW geometry (m, rad); overrides the preset's.
    pub opw: Option<OpwParams>,
    /// Joint limits (rad, rad/s); override the preset's.
    pub limits: Option<JointLimits>,
    /// tool0 → TCP.
    pub tool: FrameParams,
    /// tool0 → F/T sensor frame.
    pub sensor_mount: FrameParams,
}

impl ArmSection {
    /// The arm parameters this table describes; `Err` lists every problem.
    pub fn params(&self) -> Result<ArmParams, Vec<String>> {
        let mut p = match self.model {
            ArmModel::Irb120 | ArmModel::Custom => ArmParams::irb120(),
            ArmModel::Irb120t => ArmParams::irb120t(),
        };
        let mut errs = Vec::new();
        if self.model == ArmModel::Custom {
            if self.opw.is_none() {
                errs.push("opw: required when model = \"custom\"".to_string());
            }
            if self.limits.is_none() {
                errs.push("limits: required when model = \"custom\"".to_string());
            }
        }
        if let Some(o) = self.opw {
            p.opw = o;
        }
        if let Some(l) = self.limits {
            p.limits = l;
        }
        p.tool = self.tool;
        p.sensor_mount = self.sensor_mount;
        if let Err(e) = p.validate() {
            errs.extend(e);
        }
        if errs.is_empty() {
            Ok(p)
        } else {
            Err(errs)
        }
    }

    /// Builds the arm; `Err` lists every problem.
    pub fn build(&self) -> Result<Arm, Vec<String>> {
        let p = self.params()?;
        Arm::new(p).map_err(|e| vec![e.to_string()])
    }
}

#[cfg(feature = "config")]
impl common::config::Validate for ArmSection {
    fn validate(&self, prefix: &str, errors: &mut common::config::ConfigErrors) {
        if let Err(errs) = self.params() {
            for e in errs {
                let (key, problem) = e.split_once(':').unwrap_or(("", e.as_str()));
                errors.push(
                    format!("{prefix}.{}", key.trim()),
                    problem.trim().to_string(),
                );
            }
        }
    }
}

/// Reads `[arm]` from a service's config loader and builds the arm. Problems are recorded in
/// the loader (start-up then fails listing them), so the IRB 120 fallback is never run.
#[cfg(feature = "config")]
pub fn load_arm(l: &mut common::service::Loader) -> Arm {
    let arm: ArmSection = l.section("arm");
    arm.build().unwrap_or_else(|_| Arm::irb120())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_irb120_and_custom_needs_geometry() {
        let a = ArmSection::default();
        assert!(a.build().is_ok());
        let c = ArmSection {
            model: ArmModel::Custom,
            ..Default::default()
        };
        let errs = c.params().expect_err("custom without geometry");
        assert_eq!(errs.len(), 2);
    }
}
