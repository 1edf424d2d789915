//! TLS 1.3 on the remote-actor port ([`crate::remote`]'s frames inside it), with rustls and
//! its `ring` provider.
//!
//! No certificate authority: the learner makes a self-signed certificate for its run directory
//! and writes its fingerprint (SHA-256 of the DER) into the token file beside the run token. An
//! actor holding that file accepts exactly that certificate ([`client_config`]: the name in
//! it, its dates and its issuer are not looked at) and still checks that the server proves it
//! holds the certificate's key (the handshake signature, with the provider's
//! [`verify_tls13_signature`](rustls::crypto::verify_tls13_signature)). The run token is then
//! sent inside the session only: a recorded connection replayed later fails at the handshake,
//! whose keys are fresh per connection.
//!
//! Which connections use TLS is the learner's [`TlsMode`]: on by default for a non-loopback
//! address, forced on by `--tls`, off with `--insecure-plaintext`.

use std::fmt;
use std::net::ToSocketAddrs;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// SHA-256 of a certificate's DER encoding.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    pub fn of(der: &[u8]) -> Self {
        Fingerprint(sha2::Sha256::digest(der).into())
    }

    /// 64 hex digits (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        hex_bytes(t).map(Fingerprint).ok_or_else(|| {
            format!(
                "expected 64 hex digits (SHA-256), found {:?}",
                t.chars().take(80).collect::<String>()
            )
        })
    }
}

/// Exactly `2 * N` hex digits as `N` bytes; `None` for any other text.
pub(crate) fn hex_bytes<const N: usize>(t: &str) -> Option<[u8; N]> {
    if t.len() != 2 * N || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("hex checked");
    }
    Some(out)
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{self}")
    }
}

/// Whether the learner's actor port speaks TLS (`run.tls`; flags `--tls`,
/// `--insecure-plaintext`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// TLS unless every address `listen` resolves to is a loopback one.
    #[default]
    Auto,
    /// TLS on any address (`--tls`: loopback tests check it this way).
    On,
    /// Plaintext on any address (`--insecure-plaintext`): the token and the chunks cross in
    /// clear. For loopback and benchmarks.
    InsecurePlaintext,
}

impl TlsMode {
    /// Whether a listener on `listen` (`HOST:PORT`) uses TLS; an address that does not
    /// resolve is an error naming it.
    pub fn resolve(self, listen: &str) -> Result<bool, String> {
        match self {
            TlsMode::On => Ok(true),
            TlsMode::InsecurePlaintext => Ok(false),
            TlsMode::Auto => Ok(!is_loopback(listen)?),
        }
    }
}

/// Whether every address `addr` (`HOST:PORT`) resolves to is a loopback address.
pub fn is_loopback(addr: &str) -> Result<bool, String> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| format!("address {addr:?}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("address {addr:?} resolves to nothing"));
    }
    Ok(addrs.iter().all(|a| a.ip().is_loopback()))
}

/// The name the learner's certificate carries and actors ask for (never checked: the
/// fingerprint is).
pub const SERVER_NAME: &str = "recur-learner";

/// The crypto provider both sides use: rustls's `ring` one.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The learner's TLS 1.3 configuration for its certificate (`cert_der`) and PKCS#8 key.
pub fn server_config(
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert_der)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_der)),
        )?;
    Ok(Arc::new(config))
}

/// An actor's TLS 1.3 configuration: accepts the one certificate whose fingerprint is
/// `pinned`.
pub fn client_config(pinned: Fingerprint) -> Arc<rustls::ClientConfig> {
    let provider = provider();
    let verifier = Arc::new(PinnedCert {
        pinned,
        algorithms: provider.signature_verification_algorithms,
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("the ring provider supports TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Arc::new(config)
}

/// When a failed handshake's error (as tokio-rustls reports it) is a certificate the client
/// refused (not the pinned one: final, unlike a broken link), why.
pub fn certificate_rejected(e: &std::io::Error) -> Option<String> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(why))) => {
            Some(why.to_string())
        }
        rustls::Error::InvalidCertificate(other) => Some(format!("{other:?}")),
        _ => None,
    }
}

/// [`SERVER_NAME`] as rustls takes it.
pub fn server_name() -> ServerName<'static> {
    ServerName::try_from(SERVER_NAME).expect("a valid DNS name")
}

/// Accepts exactly the certificate with the pinned fingerprint; the handshake signature is
/// verified as usual (so the server must hold that certificate's key).
#[derive(Debug)]
struct PinnedCert {
    pinned: Fingerprint,
    algorithms: WebPkiSupportedAlgorithms,
}

/// The certificate the learner presented is not the pinned one.
#[derive(Debug, thiserror::Error)]
#[error(
    "the learner's certificate has fingerprint {got}, the token file pins {pinned} \
     (a token file of another run, or someone else answering at this address)"
)]
pub struct FingerprintMismatch {
    pub got: Fingerprint,
    pub pinned: Fingerprint,
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use subtle::ConstantTimeEq;
        let got = Fingerprint::of(end_entity);
        if bool::from(got.0.ct_eq(&self.pinned.0)) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(FingerprintMismatch {
                    got,
                    pinned: self.pinned,
                })),
            )))
        }
    }

    /// Never called: only TLS 1.3 is offered.
    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(
            "TLS 1.2 is not offered to recur learners".into(),
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_round_trip_as_hex_and_bad_ones_are_named() {
        let f = Fingerprint::of(b"a certificate");
        assert_eq!(Fingerprint::parse(&f.to_string()).unwrap(), f);
        assert_eq!(f.to_string().len(), 64);
        let err = Fingerprint::parse("xyz").unwrap_err();
        assert!(
            err.contains("64 hex digits") && err.contains("xyz"),
            "{err}"
        );
    }

    #[test]
    fn auto_mode_is_tls_off_loopback_only() {
        assert!(!TlsMode::Auto.resolve("127.0.0.1:0").unwrap());
        assert!(!TlsMode::Auto.resolve("[::1]:7070").unwrap());
        assert!(TlsMode::Auto.resolve("0.0.0.0:0").unwrap());
        assert!(TlsMode::Auto.resolve("10.1.2.3:7070").unwrap());
        assert!(TlsMode::On.resolve("127.0.0.1:0").unwrap());
        assert!(!TlsMode::InsecurePlaintext.resolve("0.0.0.0:0").unwrap());
        assert!(TlsMode::Auto.resolve("no port").is_err());
    }
}
