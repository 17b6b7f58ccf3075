//! Persisted safety latches: the e-stop and a protective stop survive a crash and restart of
//! robot-io.
//!
//! The file is a small JSON object written atomically (write to a temporary file in the same
//! directory, then rename), *before* robot-io acknowledges the stop on the bus. It is read once
//! at start-up. A missing file means "no latch"; a file that exists but cannot be read or
//! parsed means **latched** (fail safe: an operator resets explicitly). `cell up` deletes it
//! when the cell is started deliberately; the launcher's restarts of a crashed robot-io keep
//! it. No fsync: the latch must survive the *process*, and the page cache survives that; after
//! a power loss the robot controller's own e-stop circuit is what holds the arm.

use std::{io::Write, path::Path};

use common::msg::SafetyReason;
use serde::{Deserialize, Serialize};

use crate::supervisor::Latches;

#[derive(Debug, Serialize, Deserialize)]
struct File {
    estop_latched: bool,
    /// `Debug` name of the protective stop's reason, if any.
    protective_stop: Option<String>,
}

fn reason_name(r: SafetyReason) -> String {
    format!("{r:?}")
}

/// The protective stop's reason by name; any other name the file holds comes back as a
/// protective stop all the same (`MeasuredOutOfLimits`).
fn reason_from(name: &str) -> SafetyReason {
    match name {
        "ProtectiveRequest" => SafetyReason::ProtectiveRequest,
        _ => SafetyReason::MeasuredOutOfLimits,
    }
}

/// Reads the latches. Missing → none. Unreadable or corrupt → e-stop latched, with the
/// problem returned for the log.
pub fn load(path: &Path) -> (Latches, Option<String>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Latches::default(), None),
        Err(e) => {
            return (
                Latches {
                    estop: true,
                    protective: None,
                },
                Some(format!(
                    "cannot read {}: {e}; e-stop latched",
                    path.display()
                )),
            )
        }
    };
    match serde_json::from_str::<File>(&text) {
        Ok(f) => (
            Latches {
                estop: f.estop_latched,
                protective: f.protective_stop.as_deref().map(reason_from),
            },
            None,
        ),
        Err(e) => (
            Latches {
                estop: true,
                protective: None,
            },
            Some(format!("corrupt {}: {e}; e-stop latched", path.display())),
        ),
    }
}

/// Writes the latches atomically (temporary file + rename); creates the directory.
pub fn store(path: &Path, l: &Latches) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let body = serde_json::to_string(&File {
        estop_latched: l.estop,
        protective_stop: l.protective.map(reason_name),
    })
    .map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(body.as_bytes())?;
    }
    std::fs::rename(&tmp, path)
}

/// Deletes the latch file (a deliberate start of the cell). Missing is fine.
pub fn clear(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir()
            .join(format!("robot-io-latch-test-{}", std::process::id()))
            .join(name)
    }

    #[test]
    fn round_trip_missing_and_corrupt() {
        let p = tmp("a.json");
        clear(&p).unwrap();
        assert_eq!(load(&p), (Latches::default(), None));
        let l = Latches {
            estop: true,
            protective: Some(SafetyReason::MeasuredOutOfLimits),
        };
        store(&p, &l).unwrap();
        assert_eq!(load(&p).0, l);
        store(&p, &Latches::default()).unwrap();
        assert_eq!(load(&p).0, Latches::default());
        std::fs::write(&p, "{not json").unwrap();
        let (l, why) = load(&p);
        assert!(l.estop, "corrupt → latched");
        assert!(why.unwrap().contains("corrupt"));
        clear(&p).unwrap();
        clear(&p).unwrap();
    }
}
