//! The secure cell (pure): identities, the roles table, and the zenoh settings every session
//! of a secured cell carries — mutual TLS (zenoh's QUIC link) on every link and **deny-by-default access control
//! by certificate common name** (zenoh matches the common name of the first certificate only).
//!
//! One generated access-control block serves every node (router, service peers, CLI clients):
//! zenoh enforces it on each node's own transports, with the subject of the *remote* side. The
//! router is a trusted relay: it has filtered by origin already, so its subject is allowed
//! everything under the cell (a compromised router is outside the threat model,
//! docs/security.md).
//!
//! How a roles-table line becomes rules (zenoh 1.10: a rule's key expression must *include*
//! the message's; an explicit deny beats any allow of the same subject):
//! - a writer X of topic K: `put` ingress from X; `declare_subscriber` egress to X (so that X
//!   learns who subscribes: every subscription under the cell, since a declaration passes only a
//!   rule that includes its key, and a CLI subscribes with wildcards);
//! - a reader X of topic K: `declare_subscriber` ingress from X; `put` egress to X;
//! - an answerer X of RPC K: `declare_queryable` and `reply` ingress from X (its own key when K
//!   is per service), `query` egress (any key: a query travels with its querier's wildcard);
//! - a querier X of RPC K: `query` ingress from X, `reply` and `declare_queryable` egress;
//! - the owner X of liveliness token K: `liveliness_token` ingress; readers get
//!   `liveliness_query` and `declare_liveliness_subscriber` ingress and `liveliness_token`
//!   egress.
//!
//! The CLI identities (`control-host`, operators) subscribe with wildcards (`cell echo`), so
//! they get `declare_subscriber` on `cell/<id>/**` and `put` egress on every key but the
//! deadman's (an explicit deny: an operator never receives another's enable token).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The router's identity (certificate common name).
pub const ROUTER: &str = "router";
/// The `cell` CLI on the control host: the one identity that may always reset.
pub const CONTROL_HOST: &str = "control-host";
/// The default operator identity of the `cell` CLI.
pub const DEFAULT_OPERATOR: &str = "operator";
/// The certificate directory deploy/config/sim-secure.toml names (relative to deploy/config):
/// `cell certs init`'s default when the loaded config is not secured.
pub const SIM_SECURE_CERTS_DIR: &str = "../../out/certs/sim";
/// The services, each its own identity.
pub const SERVICES: [&str; 6] = [
    "robot-io",
    "control",
    "kinematics",
    "force",
    "sensor",
    "sim",
];

/// Which cell a profile secures: the simulated one (the simulator's identity and its RPCs
/// exist) or a real one (no simulator at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProfileKind {
    #[default]
    Real,
    Sim,
}

/// `[cell.security]`: a secured cell. Absent: the cell is unsecured (plain TCP, no access
/// control), and `cell status` and the launcher say so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecuritySection {
    /// `real` (no simulator identity, no simulator rules) or `sim`.
    pub profile: ProfileKind,
    /// The certificates: `ca.pem`, `<identity>.pem`, `<identity>.key` (`cell certs init`).
    /// Relative: to the config file's directory.
    pub dir: String,
    /// The services' listener (`quic/<this host's cell address>:0`). Unset: the router's
    /// host, port 0. Never an unspecified address.
    pub listen: Option<String>,
    /// A listener per service where it runs on another host (the Pi's sensor and force:
    /// `{ sensor = "quic/192.168.10.2:0", force = "quic/192.168.10.2:0" }`).
    pub listen_by_service: std::collections::BTreeMap<String, String>,
    /// Operator identities (certificate common names) of the `cell` CLI.
    pub operators: Vec<String>,
    /// Whether operators may reset an e-stop (the control host always may).
    pub operators_may_reset: bool,
}

impl Default for SecuritySection {
    fn default() -> Self {
        Self {
            profile: ProfileKind::Real,
            dir: "certs".into(),
            listen: None,
            listen_by_service: Default::default(),
            operators: vec![DEFAULT_OPERATOR.into()],
            operators_may_reset: false,
        }
    }
}

impl SecuritySection {
    /// Every identity of the cell: router, services (no `sim` on a real profile), the control
    /// host and the operators.
    pub fn identities(&self) -> Vec<String> {
        let mut ids = vec![ROUTER.to_string()];
        ids.extend(
            SERVICES
                .iter()
                .filter(|s| self.profile == ProfileKind::Sim || **s != "sim")
                .map(|s| s.to_string()),
        );
        ids.push(CONTROL_HOST.into());
        for o in &self.operators {
            if !ids.contains(o) {
                ids.push(o.clone());
            }
        }
        ids
    }

    /// Problems with the section, each with its key (empty: valid).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.dir.trim().is_empty() {
            p.push(("dir".into(), "empty: name the certificate directory".into()));
        }
        if let Some(l) = &self.listen {
            if let Err(e) = secure_endpoint(l) {
                p.push(("listen".into(), e));
            }
        }
        for (svc, l) in &self.listen_by_service {
            if !SERVICES.contains(&svc.as_str()) {
                p.push((
                    format!("listen_by_service.{svc}"),
                    format!("not a service (one of {})", SERVICES.join(", ")),
                ));
            }
            if let Err(e) = secure_endpoint(l) {
                p.push((format!("listen_by_service.{svc}"), e));
            }
        }
        for o in &self.operators {
            if !valid_identity(o) {
                p.push((
                    "operators".into(),
                    format!("{o:?}: an identity is letters, digits, '-' or '_'"),
                ));
            } else if o == ROUTER || o == CONTROL_HOST || SERVICES.contains(&o.as_str()) {
                p.push((
                    "operators".into(),
                    format!("{o:?} is a service's or the control host's identity"),
                ));
            }
        }
        p
    }
}

/// Whether a name can be an identity (a certificate common name and a key chunk).
pub fn valid_identity(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The link a secured cell's sessions use: zenoh's QUIC link (TLS 1.3 inside QUIC, the same
/// certificates, mutual authentication and certificate common names as zenoh's TLS link). Not
/// zenoh's TLS-over-TCP link: in zenoh 1.10 it shares one rustls connection between its read
/// and write tasks without a lock (eclipse-zenoh/zenoh#2557), which crashed a service under
/// load (docs/security.md, "Why QUIC").
pub const SECURE_SCHEME: &str = "quic";

/// A `quic/host:port` endpoint whose host is not unspecified; the host part is returned.
pub fn secure_endpoint(ep: &str) -> Result<&str, String> {
    let Some(rest) = ep.strip_prefix("quic/") else {
        if ep.starts_with("tls/") {
            return Err(format!(
                "{ep:?}: a secured cell uses zenoh's QUIC link (quic/HOST:PORT, the same \
                 certificates), not its TLS link, which can crash a process in zenoh 1.10 \
                 (eclipse-zenoh/zenoh#2557; docs/security.md)"
            ));
        }
        return Err(format!(
            "{ep:?}: a secured cell uses QUIC endpoints only (quic/HOST:PORT: TLS 1.3, \
             mutual certificates)"
        ));
    };
    let host = rest
        .rsplit_once(':')
        .map(|(h, _)| h)
        .ok_or_else(|| format!("{ep:?}: expected quic/HOST:PORT"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare == "0.0.0.0" || bare == "::" || bare.is_empty() {
        return Err(format!(
            "{ep:?}: an unspecified address listens on every interface: name this host's address on the cell network"
        ));
    }
    Ok(host)
}

/// Who, in the roles table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// One service.
    Service(&'static str),
    /// The `cell` CLI: the control host and every operator.
    Cli,
    /// Who may reset: the control host, and the operators when the profile says so.
    Resetters,
    /// Every identity of the cell (the e-stop engage).
    Everyone,
    /// Every service (the adminspace, status, liveliness).
    Services,
}

/// What kind of key a roles-table line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Pub/sub: writers publish, readers subscribe.
    Topic,
    /// Request/reply: writers answer (queryable), readers query.
    Rpc,
    /// Liveliness: writers own the token, readers get or subscribe.
    Liveliness,
}

/// One line of the roles table.
#[derive(Debug, Clone, Copy)]
pub struct Role {
    /// Key expression under `cell/<id>/` (or absolute when it starts with `@`).
    pub key: &'static str,
    pub access: Access,
    pub writers: &'static [Party],
    pub readers: &'static [Party],
    /// Only on the simulated cell.
    pub sim_only: bool,
}

const fn topic(key: &'static str, writers: &'static [Party], readers: &'static [Party]) -> Role {
    Role {
        key,
        access: Access::Topic,
        writers,
        readers,
        sim_only: false,
    }
}

const fn rpc(key: &'static str, writers: &'static [Party], readers: &'static [Party]) -> Role {
    Role {
        key,
        access: Access::Rpc,
        writers,
        readers,
        sim_only: false,
    }
}

const fn sim_only(r: Role) -> Role {
    Role {
        sim_only: true,
        ..r
    }
}

use Party::{Cli, Everyone, Resetters, Service as S, Services};

const ROBOT_IO: Party = S("robot-io");
const CONTROL: Party = S("control");
const KINEMATICS: Party = S("kinematics");
const FORCE: Party = S("force");
const SENSOR: Party = S("sensor");
const SIM: Party = S("sim");

/// The roles table: every key the cell's jobs use (`ROLES` is held to `topic::TOPICS` and to
/// the services' RPCs by tests). The CLI reads every topic besides (see the module doc).
pub const ROLES: &[Role] = &[
    topic("robot/joint_state", &[ROBOT_IO], &[CONTROL, KINEMATICS]),
    topic("robot/safety", &[ROBOT_IO], &[CONTROL]),
    topic("robot/estop", &[Everyone], &[ROBOT_IO]),
    topic("robot/reset", &[Resetters], &[ROBOT_IO]),
    topic("robot/motion_end", &[CONTROL], &[ROBOT_IO]),
    topic("kin/tool_pose", &[KINEMATICS], &[CONTROL, FORCE]),
    topic(
        "kin/joint_cmd",
        &[CONTROL, KINEMATICS],
        &[ROBOT_IO, CONTROL, KINEMATICS],
    ),
    topic("sensor/wrench_raw", &[SENSOR], &[FORCE]),
    topic("force/wrench", &[FORCE], &[CONTROL, ROBOT_IO]),
    topic("control/cartesian_cmd", &[CONTROL], &[KINEMATICS]),
    topic("control/mode", &[Cli], &[CONTROL]),
    topic("control/task", &[Cli], &[CONTROL]),
    topic("control/move", &[Cli], &[CONTROL]),
    // The deadman: each CLI identity publishes only its own `control/enable/<identity>`.
    topic("control/enable/*", &[Cli], &[CONTROL]),
    topic("control/hybrid_state", &[CONTROL], &[]),
    topic("control/guide_state", &[CONTROL], &[]),
    topic("control/playback_state", &[CONTROL], &[]),
    sim_only(topic("sim/truth", &[SIM], &[])),
    sim_only(topic("sim/plant/state", &[SIM], &[CONTROL])),
    sim_only(topic("sim/plant/effort_cmd", &[CONTROL], &[SIM])),
    rpc("control/rpc/lead", &[CONTROL], &[Cli]),
    rpc("kin/rpc/fk", &[KINEMATICS], &[Cli]),
    rpc("kin/rpc/ik", &[KINEMATICS], &[Cli]),
    rpc("force/rpc/tare", &[FORCE], &[Cli]),
    rpc("force/rpc/capture", &[FORCE], &[Cli]),
    rpc("force/rpc/identify", &[FORCE], &[Cli]),
    rpc("force/rpc/clear", &[FORCE], &[Cli]),
    sim_only(rpc("sim/rpc/fault", &[SIM], &[Cli])),
    sim_only(rpc("sim/rpc/scenario", &[SIM], &[Cli])),
    // Every service's status (`cell status` asks `*/status`) and liveliness token, and every
    // node's adminspace (zenoh's own introspection): readable by the CLI only.
    rpc("*/status", &[Services], &[Cli]),
    Role {
        key: "alive/*",
        access: Access::Liveliness,
        writers: &[Services],
        readers: &[Cli],
        sim_only: false,
    },
    rpc("@/**", &[Services], &[Cli]),
];

/// zenoh's message kinds, as its access-control config names them.
const PUT: &str = "put";
const DECL_SUB: &str = "declare_subscriber";
const QUERY: &str = "query";
const DECL_QBL: &str = "declare_queryable";
const REPLY: &str = "reply";
const TOKEN: &str = "liveliness_token";
const LV_QUERY: &str = "liveliness_query";
const LV_SUB: &str = "declare_liveliness_subscriber";
const ALL_MESSAGES: [&str; 9] = [
    PUT, "delete", DECL_SUB, QUERY, DECL_QBL, REPLY, TOKEN, LV_QUERY, LV_SUB,
];

const INGRESS: &str = "ingress";
const EGRESS: &str = "egress";

/// The full key expression of a roles-table key in a cell.
pub fn full_key(cell_id: &str, key: &str) -> String {
    if key.starts_with('@') {
        key.to_string()
    } else {
        format!("cell/{cell_id}/{key}")
    }
}

/// A key whose one-chunk wildcard (`*`) stands for the identity itself (`cell/c/*/status` →
/// `cell/c/robot-io/status`); other keys unchanged.
fn own_key(key: &str, identity: &str) -> String {
    key.split('/')
        .map(|c| if c == "*" { identity } else { c })
        .collect::<Vec<_>>()
        .join("/")
}

/// zenoh's "includes" for the key shapes the roles table uses (`*` one chunk, `**` any
/// number of chunks, including none).
pub fn key_includes(rule: &str, key: &str) -> bool {
    fn go(r: &[&str], k: &[&str]) -> bool {
        match (r.first(), k.first()) {
            (Some(&"**"), _) => r.len() == 1 || (0..=k.len()).any(|i| go(&r[1..], &k[i..])),
            (Some(a), Some(b)) => ((*a == "*" && *b != "**") || a == b) && go(&r[1..], &k[1..]),
            (None, None) => true,
            _ => false,
        }
    }
    let r: Vec<&str> = rule.split('/').collect();
    let k: Vec<&str> = key.split('/').collect();
    go(&r, &k)
}

/// A per-sender key's every sender: a trailing `*` chunk becomes `**` (the subscription
/// `control/enable/**`); other keys unchanged.
fn every_sender(key: &str) -> String {
    match key.strip_suffix("/*") {
        Some(base) => format!("{base}/**"),
        None => key.to_string(),
    }
}

/// What one identity may do, per (flow, message): the key expressions allowed.
pub type Grants = BTreeMap<(&'static str, &'static str), BTreeSet<String>>;

impl SecuritySection {
    /// Whether `identity` is one of `party`.
    fn is(&self, identity: &str, party: Party) -> bool {
        let cli = identity == CONTROL_HOST || self.operators.iter().any(|o| o == identity);
        match party {
            Party::Service(s) => s == identity,
            Party::Cli => cli,
            Party::Resetters => {
                identity == CONTROL_HOST
                    || (self.operators_may_reset && self.operators.iter().any(|o| o == identity))
            }
            Party::Everyone => {
                identity != ROUTER && self.identities().iter().any(|i| i == identity)
            }
            Party::Services => SERVICES.contains(&identity) && self.has_service(identity),
        }
    }

    fn has_service(&self, s: &str) -> bool {
        s != "sim" || self.profile == ProfileKind::Sim
    }

    /// The roles-table lines of this profile.
    pub fn roles(&self) -> impl Iterator<Item = &'static Role> + '_ {
        ROLES
            .iter()
            .filter(|r| !r.sim_only || self.profile == ProfileKind::Sim)
    }

    /// What `identity` may send to (ingress) and receive from (egress) a node of this cell.
    pub fn grants(&self, cell_id: &str, identity: &str) -> Grants {
        let mut g = Grants::new();
        let mut add = |flow: &'static str, msg: &'static str, key: String| {
            g.entry((flow, msg)).or_default().insert(key);
        };
        if identity == ROUTER {
            // The trusted relay: everything under the cell and the adminspace.
            for m in ALL_MESSAGES {
                for f in [INGRESS, EGRESS] {
                    add(f, m, format!("cell/{cell_id}/**"));
                    add(f, m, "@/**".into());
                }
            }
            return g;
        }
        let cli = self.is(identity, Party::Cli);
        for r in self.roles() {
            let k = full_key(cell_id, r.key);
            let writes = r.writers.iter().any(|p| self.is(identity, *p));
            let reads = r.readers.iter().any(|p| self.is(identity, *p));
            match r.access {
                Access::Topic => {
                    if writes {
                        // A per-sender key (`control/enable/*`): its own only.
                        add(INGRESS, PUT, own_key(&k, identity));
                        // Where to send: every subscription, the CLI's wildcards included (a
                        // declaration is checked against a rule that *includes* its key).
                        // Metadata only: what it may send is its `put` ingress.
                        add(EGRESS, DECL_SUB, format!("cell/{cell_id}/**"));
                    }
                    if reads {
                        // A reader of per-sender keys subscribes to them all (`…/**`).
                        let all = every_sender(&k);
                        add(INGRESS, DECL_SUB, all.clone());
                        add(EGRESS, PUT, all);
                    }
                }
                Access::Rpc => {
                    if writes {
                        // A per-service key (`*/status`): its own only.
                        let own = own_key(&k, identity);
                        add(INGRESS, DECL_QBL, own.clone());
                        add(INGRESS, REPLY, own);
                        // A query travels with its querier's key (`*/status`, `@/**`): the
                        // querier's own `query` ingress decided whether it may ask.
                        add(EGRESS, QUERY, format!("cell/{cell_id}/**"));
                        add(EGRESS, QUERY, "@/**".into());
                    }
                    if reads {
                        add(INGRESS, QUERY, k.clone());
                        add(EGRESS, REPLY, k.clone());
                        add(EGRESS, DECL_QBL, k.clone());
                    }
                }
                Access::Liveliness => {
                    if writes {
                        // Its own token only.
                        add(INGRESS, TOKEN, own_key(&k, identity));
                    }
                    if reads {
                        add(INGRESS, LV_QUERY, k.clone());
                        add(INGRESS, LV_SUB, k.clone());
                        add(EGRESS, TOKEN, k.clone());
                    }
                }
            }
        }
        if cli {
            // `cell echo`/`ls` subscribe with wildcards; what flows is filtered per key (egress
            // put), and the deadman's key never reaches a CLI (the deny in `acl`).
            add(INGRESS, DECL_SUB, format!("cell/{cell_id}/**"));
            add(EGRESS, PUT, format!("cell/{cell_id}/**"));
            add(INGRESS, LV_QUERY, format!("cell/{cell_id}/alive/**"));
            add(INGRESS, LV_SUB, format!("cell/{cell_id}/alive/**"));
            add(EGRESS, TOKEN, format!("cell/{cell_id}/alive/**"));
        }
        g
    }

    /// Whether `identity` may publish on `key` (a concrete key under `cell/<cell_id>/`), as
    /// the roles table says: what a node's access control lets in from it.
    pub fn may_publish(&self, cell_id: &str, identity: &str, key: &str) -> bool {
        let full = full_key(cell_id, key);
        self.grants(cell_id, identity)
            .get(&(INGRESS, PUT))
            .is_some_and(|keys| keys.iter().any(|r| key_includes(r, &full)))
    }

    /// The explicit denies of `identity` (they beat any allow): a CLI never receives the
    /// deadman's enables.
    pub fn denies(&self, cell_id: &str, identity: &str) -> Grants {
        let mut g = Grants::new();
        if identity != ROUTER && identity != "control" {
            g.entry((EGRESS, PUT))
                .or_default()
                .insert(format!("cell/{cell_id}/control/enable/**"));
        }
        g
    }

    /// The `access_control` block of every session of this cell: deny by default, one
    /// subject per identity (its certificate's common name), one policy each.
    pub fn acl(&self, cell_id: &str) -> Value {
        let mut rules = Vec::new();
        let mut subjects = Vec::new();
        let mut policies = Vec::new();
        for id in self.identities() {
            let mut ids = Vec::new();
            for (permission, grants) in [
                ("allow", self.grants(cell_id, &id)),
                ("deny", self.denies(cell_id, &id)),
            ] {
                for ((flow, msg), keys) in grants {
                    let rid = format!("{id}-{permission}-{flow}-{msg}");
                    rules.push(json!({
                        "id": rid,
                        "permission": permission,
                        "flows": [flow],
                        "messages": [msg],
                        "key_exprs": keys.into_iter().collect::<Vec<_>>(),
                    }));
                    ids.push(rid);
                }
            }
            subjects.push(json!({"id": id, "cert_common_names": [id]}));
            if !ids.is_empty() {
                policies.push(json!({"id": id, "rules": ids, "subjects": [id]}));
            }
        }
        json!({
            "enabled": true,
            "default_permission": "deny",
            "rules": rules,
            "subjects": subjects,
            "policies": policies,
        })
    }
}

/// The certificate files of one identity in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl CertFiles {
    pub fn of(dir: &std::path::Path, identity: &str) -> CertFiles {
        CertFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{identity}.pem")),
            key: dir.join(format!("{identity}.key")),
        }
    }

    /// The files that do not exist (each named, with how to make them).
    pub fn missing(&self) -> Vec<String> {
        [&self.ca, &self.cert, &self.key]
            .into_iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect()
    }
}

/// The zenoh settings (`key`, JSON5 value) a session of a secured cell adds to its config:
/// QUIC only (TLS 1.3; zenoh reads its settings from `transport/link/tls`), mutual
/// authentication with the identity's certificate, the cell's access control.
pub fn session_settings(
    sec: &SecuritySection,
    cell_id: &str,
    files: &CertFiles,
) -> Vec<(String, String)> {
    let s = |p: &std::path::Path| Value::String(p.display().to_string()).to_string();
    vec![
        (
            "transport/link/protocols".into(),
            format!("[\"{SECURE_SCHEME}\"]"),
        ),
        (
            "transport/link/tls/root_ca_certificate".into(),
            s(&files.ca),
        ),
        (
            "transport/link/tls/listen_certificate".into(),
            s(&files.cert),
        ),
        (
            "transport/link/tls/listen_private_key".into(),
            s(&files.key),
        ),
        (
            "transport/link/tls/connect_certificate".into(),
            s(&files.cert),
        ),
        (
            "transport/link/tls/connect_private_key".into(),
            s(&files.key),
        ),
        ("transport/link/tls/enable_mtls".into(), "true".into()),
        (
            "transport/link/tls/verify_name_on_connect".into(),
            "true".into(),
        ),
        (
            "transport/link/tls/close_link_on_expiration".into(),
            "false".into(),
        ),
        ("access_control".into(), sec.acl(cell_id).to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim() -> SecuritySection {
        SecuritySection {
            profile: ProfileKind::Sim,
            operators_may_reset: true,
            ..SecuritySection::default()
        }
    }

    fn may(sec: &SecuritySection, id: &str, flow: &str, msg: &str, key: &str) -> bool {
        let k = full_key("c", key);
        let covered = |g: &Grants| {
            g.get(&(flow_str(flow), msg_str(msg)))
                .is_some_and(|keys| keys.iter().any(|r| key_includes(r, &k)))
        };
        covered(&sec.grants("c", id)) && !covered(&sec.denies("c", id))
    }

    fn flow_str(f: &str) -> &'static str {
        if f == INGRESS {
            INGRESS
        } else {
            EGRESS
        }
    }

    fn msg_str(m: &str) -> &'static str {
        ALL_MESSAGES
            .iter()
            .find(|x| **x == m)
            .copied()
            .unwrap_or("?")
    }

    #[test]
    fn every_key_the_cell_uses_has_a_role() {
        for t in crate::topic::TOPICS {
            assert!(
                ROLES.iter().any(|r| r.access == Access::Topic
                    && (r.key == t.suffix || r.key == format!("{}/*", t.suffix))),
                "topic {} has no line in the roles table",
                t.suffix
            );
        }
        for k in [
            crate::topic::CONTROL_RPC_LEAD.to_string(),
            format!("{}/fk", crate::topic::KIN_RPC_PREFIX),
            format!("{}/ik", crate::topic::KIN_RPC_PREFIX),
        ] {
            assert!(ROLES.iter().any(|r| r.key == k), "{k}");
        }
        for r in ROLES {
            assert!(!r.writers.is_empty(), "{} has no writer", r.key);
        }
    }

    #[test]
    fn only_robot_io_publishes_robot_state() {
        let s = sim();
        for id in s.identities() {
            for key in ["robot/joint_state", "robot/safety"] {
                assert_eq!(
                    may(&s, &id, INGRESS, PUT, key),
                    id == "robot-io" || id == ROUTER,
                    "{id} on {key}"
                );
            }
        }
    }

    #[test]
    fn every_identity_may_engage_the_estop() {
        for s in [sim(), SecuritySection::default()] {
            for id in s.identities() {
                assert!(may(&s, &id, INGRESS, PUT, "robot/estop"), "{id}");
            }
        }
    }

    #[test]
    fn resets_only_from_control_host_unless_the_profile_says() {
        let real = SecuritySection::default();
        for id in real.identities() {
            assert_eq!(
                may(&real, &id, INGRESS, PUT, "robot/reset"),
                id == CONTROL_HOST || id == ROUTER,
                "{id}"
            );
        }
        assert!(may(&sim(), "operator", INGRESS, PUT, "robot/reset"));
        assert!(!may(&sim(), "sensor", INGRESS, PUT, "robot/reset"));
    }

    #[test]
    fn no_one_moves_the_arm_but_its_commanders() {
        let s = sim();
        for id in s.identities() {
            let commander = ["control", "kinematics", ROUTER].contains(&id.as_str());
            assert_eq!(
                may(&s, &id, INGRESS, PUT, "kin/joint_cmd"),
                commander,
                "{id}"
            );
            assert_eq!(
                may(&s, &id, INGRESS, QUERY, "control/rpc/lead"),
                id == "operator" || id == CONTROL_HOST || id == ROUTER,
                "{id}"
            );
        }
        // The sensor node: its own data and the e-stop, nothing else.
        assert!(may(&s, "sensor", INGRESS, PUT, "sensor/wrench_raw"));
        assert!(!may(&s, "sensor", INGRESS, PUT, "force/wrench"));
        assert!(!may(&s, "sensor", INGRESS, QUERY, "@/**"));
        assert!(!may(&s, "sensor", INGRESS, QUERY, "force/rpc/tare"));
    }

    #[test]
    fn a_real_profile_has_no_sim_rules() {
        let real = SecuritySection::default();
        assert!(!real.identities().iter().any(|i| i == "sim"));
        let acl = real.acl("c").to_string();
        assert!(!acl.contains("cell/c/sim/"), "{acl}");
        assert!(sim().acl("c").to_string().contains("cell/c/sim/rpc/fault"));
    }

    #[test]
    fn no_one_but_control_reads_an_enable() {
        let s = sim();
        for id in s.identities() {
            let reads = may(&s, &id, EGRESS, PUT, "control/enable/operator");
            assert_eq!(reads, id == "control" || id == ROUTER, "{id}");
        }
        // Each CLI identity publishes its own deadman key only.
        assert!(may(&s, "operator", INGRESS, PUT, "control/enable/operator"));
        assert!(!may(
            &s,
            "operator",
            INGRESS,
            PUT,
            "control/enable/control-host"
        ));
        assert!(!may(&s, "operator", INGRESS, PUT, "control/enable"));
        assert!(may(&s, "control", INGRESS, DECL_SUB, "control/enable/**"));
        // An operator still reads everything else with its wildcard subscription.
        assert!(may(&s, "operator", INGRESS, DECL_SUB, "**"));
        assert!(may(&s, "operator", EGRESS, PUT, "robot/joint_state"));
    }

    #[test]
    fn the_generated_config_opens_in_zenoh_config() {
        let s = sim();
        let files = CertFiles::of(std::path::Path::new("/nonexistent"), "operator");
        let mut cfg = zenoh::Config::default();
        for (k, v) in session_settings(&s, "cell1", &files) {
            cfg.insert_json5(&k, &v)
                .unwrap_or_else(|e| panic!("{k} = {v}: {e}"));
        }
        // A misspelt field is refused (the check above can fail).
        assert!(cfg
            .insert_json5(
                "access_control",
                r#"{enabled: true, default_permisson: "deny"}"#
            )
            .is_err());
    }

    /// deploy/zenoh/secure/acl-*.json5: the access control the two shipped secured configs
    /// generate (sim-secure.toml, irb120-real.toml), for reading and for a router run outside
    /// the cell's launcher (zenohd). Regenerate with `UPDATE_DOCS=1 cargo test -p common`.
    #[test]
    fn the_generated_acl_files_are_current() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (config, file) in [
            ("sim-secure.toml", "acl-sim.json5"),
            ("irb120-real.toml", "acl-cell1.json5"),
        ] {
            let text =
                std::fs::read_to_string(root.join("deploy/config").join(config)).expect("config");
            let t: toml::Table = text.parse().expect("toml");
            let cell = t["cell"].as_table().expect("[cell]");
            let id = cell["id"].as_str().expect("cell.id");
            let sec: SecuritySection = cell["security"]
                .clone()
                .try_into()
                .expect("[cell.security]");
            let body = serde_json::to_string_pretty(&json!({ "access_control": sec.acl(id) }))
                .expect("json");
            let want = format!(
                "// Generated by common::security from deploy/config/{config} (cell {id:?}): the\n\
                 // access control every session of that cell carries. Do not edit; regenerate with\n\
                 // `UPDATE_DOCS=1 cargo test -p common` (docs/security.md).\n{body}\n"
            );
            let path = root.join("deploy/zenoh/secure").join(file);
            if std::env::var_os("UPDATE_DOCS").is_some() {
                std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
                std::fs::write(&path, &want).expect("write");
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                have == want,
                "{} is stale: run `UPDATE_DOCS=1 cargo test -p common`",
                path.display()
            );
            // What zenoh itself makes of it.
            let mut cfg = zenoh::Config::default();
            cfg.insert_json5("access_control", &sec.acl(id).to_string())
                .expect("zenoh takes it");
        }
    }

    #[test]
    fn endpoints_and_identities_are_checked() {
        assert_eq!(secure_endpoint("quic/127.0.0.1:7447"), Ok("127.0.0.1"));
        assert!(secure_endpoint("tcp/127.0.0.1:7447").is_err());
        assert!(secure_endpoint("quic/0.0.0.0:0").is_err());
        assert!(secure_endpoint("quic/[::]:0").is_err());
        // The TLS link is refused with the reason.
        let e = secure_endpoint("tls/127.0.0.1:7447").expect_err("tls/ refused");
        assert!(e.contains("2557") && e.contains("quic/"), "{e}");
        let bad = SecuritySection {
            operators: vec!["robot-io".into(), "a b".into()],
            listen: Some("tcp/10.0.0.1:0".into()),
            ..SecuritySection::default()
        };
        assert_eq!(bad.problems().len(), 3, "{:?}", bad.problems());
        assert!(SecuritySection::default().problems().is_empty());
    }
}
