//! The running scenario (pure): the world, the optional Raibert–Craig 2-DOF plant, and the
//! **one simulator clock** they advance on; plus the pure half of the scenario RPC
//! (`cell/<id>/sim/rpc/scenario`).
//!
//! # Time
//! The simulator runs one 1 kHz base tick (the F/T sensor's rate, [`BASE_TICK_S`]). Every
//! [`Scenario::tick`] advances *scenario time* by exactly one tick: `t = ticks × 1 ms` since the
//! scenario was loaded or reset. The world (surface ramps, contact triggers, the hand) and the
//! plant (stepped every tick, its clock set to `t`) see the same `t`; the shell advances the
//! EGM controller's servo by the same tick. If the host misses wall-clock ticks the shell
//! simply runs fewer ticks: scenario time then runs slower than wall time, and every consumer
//! still sees the same time.
//!
//! # Scenario RPC
//! A JSON object with any of (applied in this order; all checks happen before anything
//! changes, so a bad request changes nothing):
//!
//! * `"load": "<name>"` — a scenario from the scenario directory (`table-contact`,
//!   `scenarios/table-contact.toml`; never a path: [`files`]), or `"load_toml": "<toml text>"`.
//!   Loading implies a reset.
//! * `"set": {"<dotted.key>": value, …}` — values at dotted key paths into the scenario's
//!   serde tree (`surfaces.0.stiffness_n_per_m`, `rc_plant.static_friction`,
//!   `hand.trigger`; `surfaces[0]` works too; an index one past the end appends), and
//!   `plant.<key>` for the run-time plant settings ([`PlantRuntime`]). Unknown keys are errors
//!   that list the keys available there; the result is validated as a whole. Without `load`,
//!   a `set` is applied live: time, triggers, the hand's progress and the plant's state carry
//!   on.
//! * `"reset": true` — the world back to its initial state (surfaces home, triggers armed,
//!   hand at the start), the plant at its initial pose at rest, scenario time 0. The simulated
//!   IRB 120 is not moved (it is robot-io's, under its supervisor).
//! * `"arm": true` — re-arm every `contact` trigger (see [`crate::world::trigger`]).
//!
//! An empty body (or `{}`) only asks for the summary. Every answer is [`Scenario::summary`].

use kinematics::Arm;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    sensor::SplitMix64,
    world::{
        rc_plant::PlantState, RcPlant, SensorTruth, ServoParams, World, WorldConfig, WorldError,
    },
};

/// The base tick (s): 1 kHz, the F/T sensors' rate.
pub const BASE_TICK_S: f64 = 1e-3;

/// Base ticks per second (scenario time is `ticks / TICKS_PER_S`, exact for whole ms).
pub const TICKS_PER_S: f64 = 1000.0;

/// `[sim.plant]` settings that may change at run time (`plant.<key>` in a `set`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlantRuntime {
    /// An effort command older than this (wall time since it arrived) is stale → zero effort
    /// (ms). Default 40 ms: more than two periods of the slowest documented law (60 Hz,
    /// 16.7 ms).
    pub command_timeout_ms: f64,
    /// Standard deviation of the white noise added to the published `wrist_force_n` (N, per
    /// axis). The ground truth stays in the status.
    pub wrist_force_noise_std_n: f64,
}

impl Default for PlantRuntime {
    fn default() -> Self {
        Self {
            command_timeout_ms: 40.0,
            wrist_force_noise_std_n: 0.05,
        }
    }
}

impl PlantRuntime {
    /// Every problem, keys prefixed with `prefix` (e.g. `plant`).
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        let t = self.command_timeout_ms;
        if !t.is_finite() || !(1.0..=10_000.0).contains(&t) {
            e.push(format!(
                "{prefix}.command_timeout_ms: must be in [1, 10000] ms, at least one base tick \
                 (got {t})"
            ));
        }
        let n = self.wrist_force_noise_std_n;
        if !n.is_finite() || !(0.0..=10.0).contains(&n) {
            e.push(format!(
                "{prefix}.wrist_force_noise_std_n: must be in [0, 10] N (got {n})"
            ));
        }
        e
    }
}

/// The effort to apply: the newest command `(effort, age_s)` while it is fresh (age ≤ the
/// timeout), otherwise zero. Returns the effort and whether the command stream is stale
/// (silent or too old).
pub fn effort_or_zero(cmd: Option<([f64; 2], f64)>, timeout_ms: f64) -> ([f64; 2], bool) {
    match cmd {
        Some((e, age_s)) if age_s.is_finite() && age_s * 1e3 <= timeout_ms => (e, false),
        _ => ([0.0; 2], true),
    }
}

/// The 2-DOF plant as the simulator runs it: the physics plus the wrist-force sensor noise.
#[derive(Debug, Clone)]
struct PlantSim {
    plant: RcPlant,
    rng: SplitMix64,
    stale: bool,
}

/// One base tick of the plant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantTick {
    /// The plant's state, `t` = scenario time; `wrist_force` is the true (noise-free) value.
    pub state: PlantState,
    /// The wrist force as the plant's sensor reports it (truth + noise), N.
    pub wrist_force_measured: [f64; 2],
    /// No fresh effort command: zero effort was applied.
    pub command_stale: bool,
}

/// What one base tick produced.
#[derive(Debug, Clone)]
pub struct TickOutput {
    /// Scenario time at the end of the tick (s).
    pub t: f64,
    /// The true wrench at the F/T sensor.
    pub truth: Result<SensorTruth, WorldError>,
    /// The plant, when it runs.
    pub plant: Option<PlantTick>,
}

/// A parsed scenario RPC body. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub load: Option<String>,
    pub load_toml: Option<String>,
    pub set: Option<Map<String, Value>>,
    #[serde(default)]
    pub reset: bool,
    #[serde(default)]
    pub arm: bool,
}

impl Request {
    /// Parses a body; empty = a query.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        if body.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(Self::default());
        }
        let r: Request = serde_json::from_slice(body).map_err(|e| {
            let e = e.to_string();
            if e.contains("unknown field") {
                format!("bad request: {e}")
            } else {
                format!(
                    "bad request: {e} (expected a JSON object with any of \"load\", \
                     \"load_toml\", \"set\", \"reset\", \"arm\")"
                )
            }
        })?;
        if r.load.is_some() && r.load_toml.is_some() {
            return Err("\"load\" and \"load_toml\" exclude each other".into());
        }
        Ok(r)
    }
}

/// Reads a scenario file for `load`: given the path as written, the text and the path to
/// report (the shell resolves it; tests pass a fake).
pub type ReadFile<'a> = &'a dyn Fn(&str) -> Result<(String, String), String>;

/// What an applied request changed that the shell must pass on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// New servo parameters for the emulated controller (changed by a load or a set).
    pub servo: Option<ServoParams>,
}

/// Splits a dotted key path (`a.0.b`, also `a[0].b`) into segments.
fn segments(path: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in path.split('.') {
        // `name[3][4]` → name, 3, 4
        let (head, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !head.is_empty() {
            out.push(head.to_string());
        } else if rest.is_empty() {
            return Err(format!("{path:?}: empty key segment"));
        }
        while !rest.is_empty() {
            let close = rest
                .find(']')
                .ok_or_else(|| format!("{path:?}: unclosed '['"))?;
            let idx = &rest[1..close];
            if idx.is_empty() {
                return Err(format!("{path:?}: empty index"));
            }
            out.push(idx.to_string());
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return Err(format!("{path:?}: unexpected {rest:?} after an index"));
            }
        }
    }
    if out.is_empty() {
        return Err("empty key".into());
    }
    Ok(out)
}

fn keys_of(m: &Map<String, Value>) -> String {
    m.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// Sets `value` at the dotted key path `path` in the serde tree `tree`. Objects: the key must
/// exist (the error lists the keys there); arrays: an index `< len` replaces, `== len` appends.
/// A `null` on the way (an unset optional table) must be set whole.
pub fn set_path(tree: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let segs = segments(path)?;
    let mut cur = tree;
    let mut walked = String::new();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let here = if walked.is_empty() {
            "the top level".to_string()
        } else {
            format!("`{walked}`")
        };
        let next: &mut Value = match cur {
            Value::Object(m) => {
                if !m.contains_key(seg) {
                    return Err(format!(
                        "unknown key `{seg}` in {here} (keys there: {})",
                        keys_of(m)
                    ));
                }
                match m.get_mut(seg) {
                    Some(v) => v,
                    None => return Err(format!("unknown key `{seg}`")),
                }
            }
            Value::Array(a) => {
                let idx: usize = seg
                    .parse()
                    .map_err(|_| format!("{here} is a list: `{seg}` is not an index"))?;
                if idx > a.len() || (idx == a.len() && !last) {
                    return Err(format!(
                        "index {idx} out of range in {here} ({} element(s); {} appends)",
                        a.len(),
                        a.len()
                    ));
                }
                if idx == a.len() {
                    a.push(value);
                    return Ok(());
                }
                &mut a[idx]
            }
            Value::Null => {
                return Err(format!(
                    "{here} is not set: set the whole table, e.g. {{\"{walked}\": {{…}}}}"
                ))
            }
            _ => {
                return Err(format!(
                    "{here} is a value, not a table: cannot set `{seg}`"
                ))
            }
        };
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(seg);
        if last {
            *next = value;
            return Ok(());
        }
        cur = next;
    }
    Ok(())
}

/// Applies `set` to a scenario and the plant's run-time settings: every key at once, each
/// checked on its own (an unknown key or a value of the wrong type is reported with its key),
/// then the whole validated. `Err` lists every problem.
pub fn apply_set(
    config: &WorldConfig,
    runtime: &PlantRuntime,
    set: &Map<String, Value>,
) -> Result<(WorldConfig, PlantRuntime), Vec<String>> {
    let mut errs = Vec::new();
    let mut world = serde_json::to_value(config).map_err(|e| vec![e.to_string()])?;
    let mut plant = serde_json::to_value(runtime).map_err(|e| vec![e.to_string()])?;
    for (key, value) in set {
        let (tree, path, is_plant) = match key.strip_prefix("plant.") {
            Some(rest) => (&mut plant, rest, true),
            None => (&mut world, key.as_str(), false),
        };
        if is_plant && matches!(rest_root(path), "enabled" | "rate_hz" | "noise_seed") {
            errs.push(format!(
                "{key}: fixed at start-up (set [sim.plant] in the cell config)"
            ));
            continue;
        }
        let mut trial = tree.clone();
        if let Err(e) = set_path(&mut trial, path, value.clone()) {
            errs.push(format!("{key}: {e}"));
            continue;
        }
        // Type check against the target struct with just this key changed.
        let typed = if is_plant {
            serde_json::from_value::<PlantRuntime>(trial.clone()).map(|_| ())
        } else {
            serde_json::from_value::<WorldConfig>(trial.clone()).map(|_| ())
        };
        match typed {
            Ok(()) => *tree = trial,
            Err(e) => errs.push(format!("{key}: {e}")),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let cfg: WorldConfig = serde_json::from_value(world).map_err(|e| vec![e.to_string()])?;
    let rt: PlantRuntime = serde_json::from_value(plant).map_err(|e| vec![e.to_string()])?;
    let mut errs = cfg.validate();
    errs.extend(rt.validate("plant"));
    if errs.is_empty() {
        Ok((cfg, rt))
    } else {
        Err(errs)
    }
}

fn rest_root(path: &str) -> &str {
    path.split(['.', '[']).next().unwrap_or(path)
}

/// The running scenario. See the module docs.
#[derive(Debug, Clone)]
pub struct Scenario {
    world: World,
    source: String,
    plant: Option<PlantSim>,
    plant_enabled: bool,
    plant_seed: u64,
    runtime: PlantRuntime,
    ticks: u64,
}

impl Scenario {
    /// A scenario at time 0. `source` names where it came from (for the summary); the plant
    /// runs when `plant_enabled` (its wrist-force noise seeded with `plant_seed`). `Err` lists
    /// every problem.
    pub fn new(
        config: WorldConfig,
        source: impl Into<String>,
        arm: Arm,
        plant_enabled: bool,
        runtime: PlantRuntime,
        plant_seed: u64,
    ) -> Result<Self, Vec<String>> {
        let errs = runtime.validate("plant");
        if !errs.is_empty() {
            return Err(errs);
        }
        let world = World::new(config, arm)?;
        let plant = if plant_enabled {
            Some(PlantSim::new(world.rc_plant()?, plant_seed))
        } else {
            None
        };
        Ok(Self {
            world,
            source: source.into(),
            plant,
            plant_enabled,
            plant_seed,
            runtime,
            ticks: 0,
        })
    }

    /// Scenario time (s): base ticks since the scenario was loaded or reset × 1 ms.
    pub fn time_s(&self) -> f64 {
        self.ticks as f64 / TICKS_PER_S
    }

    /// Base ticks since the scenario was loaded or reset.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Where the scenario came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The run-time plant settings.
    pub fn runtime(&self) -> PlantRuntime {
        self.runtime
    }

    /// One base tick: scenario time advances by 1 ms; the world's truth is evaluated for the
    /// joints `q`, `qd` at the new time and the plant (if it runs) is stepped over the tick
    /// with the newest effort command `(effort, age_s)` (zero when stale, see
    /// [`effort_or_zero`]).
    pub fn tick(
        &mut self,
        q: &[f64; 6],
        qd: &[f64; 6],
        cmd: Option<([f64; 2], f64)>,
    ) -> TickOutput {
        let t0 = self.time_s();
        self.ticks += 1;
        let t = self.time_s();
        let truth = self.world.sensor_wrench(q, qd, t, BASE_TICK_S);
        let timeout = self.runtime.command_timeout_ms;
        let noise = self.runtime.wrist_force_noise_std_n;
        let plant = self
            .plant
            .as_mut()
            .map(|p| p.tick(cmd, timeout, noise, t0, t));
        TickOutput { t, truth, plant }
    }

    /// Back to the initial state at scenario time 0 (see the module docs).
    pub fn reset(&mut self) {
        self.world.reset();
        if let Some(p) = self.plant.as_mut() {
            if let Ok(fresh) = self.world.rc_plant() {
                *p = PlantSim::new(fresh, self.plant_seed);
            }
        }
        self.ticks = 0;
    }

    /// Re-arms every `contact` trigger (world surfaces, hand, plant surface).
    pub fn arm_triggers(&mut self) {
        self.world.arm_triggers();
        if let Some(p) = self.plant.as_mut() {
            p.plant.arm_trigger();
        }
    }

    /// Applies a scenario RPC request (see the module docs). `read_file` reads a scenario
    /// file: given the path as written, it returns the text and the path to report. Nothing
    /// changes unless every check passes; `Err` lists every problem.
    pub fn apply(
        &mut self,
        req: &Request,
        read_file: ReadFile<'_>,
    ) -> Result<Applied, Vec<String>> {
        if req.load.is_some() && req.load_toml.is_some() {
            return Err(vec!["\"load\" and \"load_toml\" exclude each other".into()]);
        }
        let loaded = if let Some(p) = &req.load {
            let (text, shown) = read_file(p).map_err(|e| vec![format!("load: {e}")])?;
            let cfg = WorldConfig::from_toml_str(&text)
                .map_err(|e| vec![format!("load {shown}: {e}")])?;
            Some((cfg, shown))
        } else if let Some(text) = &req.load_toml {
            let cfg =
                WorldConfig::from_toml_str(text).map_err(|e| vec![format!("load_toml: {e}")])?;
            Some((cfg, "inline TOML".to_string()))
        } else {
            None
        };
        let base = loaded
            .as_ref()
            .map_or_else(|| self.world.config().clone(), |(c, _)| c.clone());
        let (cfg, runtime) = match &req.set {
            Some(set) => apply_set(&base, &self.runtime, set)?,
            None => (base, self.runtime),
        };
        let old_servo = self.world.config().servo.clone();
        // Build the candidate completely before committing anything.
        let mut next = self.clone();
        next.runtime = runtime;
        if let Some((_, shown)) = loaded {
            next.world = World::new(cfg, self.world.arm().clone())?;
            next.source = shown;
            next.plant = if self.plant_enabled {
                Some(PlantSim::new(next.world.rc_plant()?, self.plant_seed))
            } else {
                None
            };
            next.ticks = 0;
        } else if req.set.is_some() {
            next.world.set_config(cfg)?;
            if let Some(p) = next.plant.as_mut() {
                p.plant.set_params(next.world.config().rc_plant)?;
            }
        }
        if req.reset {
            next.reset();
        }
        if req.arm {
            next.arm_triggers();
        }
        let new_servo = next.world.config().servo.clone();
        *self = next;
        Ok(Applied {
            servo: (new_servo != old_servo).then_some(new_servo),
        })
    }

    /// The scenario summary every RPC answer carries: time, source, surfaces (with their
    /// current offsets and triggers), the hand, the plant (parameters, trigger, state), the
    /// run-time plant settings and the whole scenario tree (`config`, the key paths `set`
    /// takes).
    pub fn summary(&self) -> Value {
        let t = self.time_s();
        let cfg = self.world.config();
        let surfaces: Vec<Value> = self
            .world
            .contact_model()
            .surfaces
            .iter()
            .zip(cfg.surfaces.iter())
            .map(|(s, p)| {
                let off = s.offset(t);
                let vel = s.velocity(t);
                serde_json::json!({
                    "name": s.name,
                    "kind": p.kind,
                    "stiffness_n_per_m": s.stiffness,
                    "damping_n_s_per_m": s.damping,
                    "mu": s.mu,
                    "motion": s.motion,
                    "trigger": s.trigger_status(),
                    "offset_m": [off.x, off.y, off.z],
                    "velocity_m_s": [vel.x, vel.y, vel.z],
                })
            })
            .collect();
        let hand = self.world.hand();
        let plant = self.plant.as_ref().map(|p| {
            let st = p.plant.state();
            serde_json::json!({
                "trigger": p.plant.trigger_status(),
                "t_s": st.t,
                "q": st.q,
                "hand_pos_m": st.hand_pos,
                "wrist_force_true_n": st.wrist_force,
                "contact_force_n": st.contact_force,
                "in_contact": st.in_contact,
                "surface_offset_m": st.surface_offset,
                "command_stale": p.stale,
            })
        });
        serde_json::json!({
            "sim_time_s": t,
            "ticks": self.ticks,
            "source": self.source,
            "surfaces": surfaces,
            "hand": {
                "enabled": hand.params().enabled,
                "trigger": hand.trigger_status(),
                "progress_m": hand.progress(),
                "path_length_m": hand.path_length(),
                "hand_pos_m": hand.hand_position(),
            },
            "rc_plant": {
                "running": self.plant.is_some(),
                "params": cfg.rc_plant,
                "state": plant,
            },
            "plant": self.runtime,
            "config": cfg,
        })
    }
}

impl PlantSim {
    fn new(plant: RcPlant, seed: u64) -> Self {
        Self {
            plant,
            rng: SplitMix64(seed),
            stale: true,
        }
    }

    fn tick(
        &mut self,
        cmd: Option<([f64; 2], f64)>,
        timeout_ms: f64,
        noise_std: f64,
        t0: f64,
        t: f64,
    ) -> PlantTick {
        let (effort, stale) = effort_or_zero(cmd, timeout_ms);
        self.stale = stale;
        self.plant.set_time(t0);
        let mut state = self.plant.step(effort, t - t0);
        self.plant.set_time(t);
        state.t = t;
        let mut measured = state.wrist_force;
        if noise_std > 0.0 {
            for v in &mut measured {
                *v += noise_std * self.rng.gaussian();
            }
        }
        PlantTick {
            state,
            wrist_force_measured: measured,
            command_stale: stale,
        }
    }
}

pub mod files;
#[cfg(test)]
mod tests;
