//! `cell certs init`: a cell's certificate authority and one certificate per identity, for a
//! secured cell (`[cell.security]`, docs/security.md).
//!
//! Each identity's certificate carries its name as the common name (zenoh's access control
//! matches the common name of the first certificate only), the IP addresses and host names
//! it is reached at as subject alternative names (zenoh verifies the name on connect), and
//! both TLS usages (every node listens and connects). Keys are ECDSA P-256, written 0600.
//!
//! A test CA: for a production cell, use the plant's own PKI with the same common names.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// What to make.
#[derive(Debug, Clone)]
pub struct CertsRequest {
    pub dir: PathBuf,
    /// The identities (router, services, control host, operators).
    pub identities: Vec<String>,
    /// Subject alternative names of every certificate (IP addresses or host names).
    pub names: Vec<String>,
    /// Validity (days from now).
    pub days: u32,
    /// Replace existing files (a new CA: every node must get its new certificate).
    pub force: bool,
}

/// Makes `ca.pem` (and `ca.key`) and `<identity>.pem`/`.key` for each identity; returns the
/// files written. Refuses to overwrite an existing CA unless `force`.
pub fn init(req: &CertsRequest) -> anyhow::Result<Vec<PathBuf>> {
    if req.identities.is_empty() {
        anyhow::bail!("no identity to make a certificate for");
    }
    for id in &req.identities {
        if !common::security::valid_identity(id) {
            anyhow::bail!("{id:?}: an identity is letters, digits, '-' or '_'");
        }
    }
    let ca_pem = req.dir.join("ca.pem");
    if ca_pem.exists() && !req.force {
        anyhow::bail!(
            "{} exists: a new CA means a new certificate on every node of the cell; pass --force to replace it",
            ca_pem.display()
        );
    }
    std::fs::create_dir_all(&req.dir).with_context(|| format!("creating {}", req.dir.display()))?;
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(1);
    let not_after = now + time::Duration::days(i64::from(req.days.max(1)));

    let ca_key = KeyPair::generate().context("CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "robot cell CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca = ca_params.self_signed(&ca_key).context("CA certificate")?;

    let mut written = Vec::new();
    write(&ca_pem, &ca.pem(), 0o644)?;
    written.push(ca_pem);
    let ca_key_path = req.dir.join("ca.key");
    write(&ca_key_path, &ca_key.serialize_pem(), 0o600)?;
    written.push(ca_key_path);

    for id in &req.identities {
        let key = KeyPair::generate().with_context(|| format!("{id}: key"))?;
        let mut p = CertificateParams::new(req.names.clone())
            .with_context(|| format!("{id}: subject alternative names {:?}", req.names))?;
        p.distinguished_name.push(DnType::CommonName, id.as_str());
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        p.not_before = not_before;
        p.not_after = not_after;
        let cert = p
            .signed_by(&key, &ca, &ca_key)
            .with_context(|| format!("{id}: certificate"))?;
        let cert_path = req.dir.join(format!("{id}.pem"));
        let key_path = req.dir.join(format!("{id}.key"));
        write(&cert_path, &cert.pem(), 0o644)?;
        write(&key_path, &key.serialize_pem(), 0o600)?;
        written.push(cert_path);
        written.push(key_path);
    }
    Ok(written)
}

/// Writes a file with `mode`, whole (temporary file, then rename).
fn write(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use x509_parser::prelude::*;

    fn der(path: &Path) -> Vec<u8> {
        let text = std::fs::read(path).expect("read");
        let (_, pem) = parse_x509_pem(&text).expect("PEM");
        pem.contents
    }

    #[test]
    fn certs_init_makes_one_cn_per_identity_signed_by_the_ca() {
        let dir = std::env::temp_dir().join(format!("cell-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let req = CertsRequest {
            dir: dir.clone(),
            identities: vec!["router".into(), "robot-io".into(), "operator".into()],
            names: vec!["127.0.0.1".into(), "localhost".into()],
            days: 30,
            force: false,
        };
        let written = init(&req).expect("init");
        assert_eq!(written.len(), 2 + 2 * 3);
        let ca_der = der(&dir.join("ca.pem"));
        let (_, ca) = X509Certificate::from_der(&ca_der).expect("CA");
        assert!(ca.is_ca());
        for id in &req.identities {
            let d = der(&dir.join(format!("{id}.pem")));
            let (_, c) = X509Certificate::from_der(&d).expect("certificate");
            let cn: Vec<_> = c
                .subject()
                .iter_common_name()
                .filter_map(|a| a.as_str().ok())
                .collect();
            assert_eq!(cn, vec![id.as_str()], "the common name is the identity");
            // Signed by the CA: its ECDSA P-256 signature over the certificate's body.
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_ASN1,
                &ca.public_key().subject_public_key.data,
            )
            .verify(c.tbs_certificate.as_ref(), &c.signature_value.data)
            .expect("signed by the CA");
            assert!(!c.is_ca());
            let san = c
                .subject_alternative_name()
                .expect("parse")
                .expect("a SAN extension");
            let ips: Vec<_> = san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::IPAddress(b) => Some(b.to_vec()),
                    _ => None,
                })
                .collect();
            assert_eq!(ips, vec![vec![127u8, 0, 0, 1]]);
            let mode = std::fs::metadata(dir.join(format!("{id}.key")))
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{id}.key");
        }
        // A second init keeps the CA unless forced.
        assert!(init(&req).is_err());
        assert!(init(&CertsRequest {
            force: true,
            ..req.clone()
        })
        .is_ok());
        assert!(init(&CertsRequest {
            identities: vec!["a b".into()],
            force: true,
            ..req
        })
        .is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
