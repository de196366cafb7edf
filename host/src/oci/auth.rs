//! Registry credentials from a `kubernetes.io/dockerconfigjson` pull secret.

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::OciError;

/// The parsed content of a dockerconfigjson (`.dockerconfigjson` key of a
/// pull secret, or `~/.docker/config.json`).
#[derive(Clone, Default, Deserialize)]
pub struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

impl std::fmt::Debug for DockerConfig {
    // Never print credentials: only which registries have some.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerConfig")
            .field("registries", &self.auths.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Clone, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl DockerConfig {
    /// Parses dockerconfigjson bytes.
    pub fn from_json(bytes: &[u8]) -> Result<DockerConfig, OciError> {
        let config: DockerConfig = serde_json::from_slice(bytes)
            .map_err(|e| OciError::InvalidDockerConfig(format!("not valid JSON: {e}")))?;
        // Decode every entry now so a broken secret is reported when it is
        // read, not on the first pull from that registry.
        for (registry, entry) in &config.auths {
            entry.credentials(registry)?;
        }
        Ok(config)
    }

    /// A config holding one username/password for `registry` (`host:port`).
    pub fn basic(registry: &str, username: &str, password: &str) -> DockerConfig {
        let mut auths = BTreeMap::new();
        auths.insert(
            registry.to_string(),
            AuthEntry {
                auth: None,
                username: Some(username.to_string()),
                password: Some(password.to_string()),
            },
        );
        DockerConfig { auths }
    }

    /// The credentials for `registry` (`host:port`, as in the reference), or
    /// anonymous access when the config has none for it.
    pub fn auth_for(&self, registry: &str) -> Result<RegistryAuth, OciError> {
        let entry = self
            .auths
            .iter()
            .find(|(key, _)| registry_key(key) == registry);
        match entry {
            Some((key, entry)) => match entry.credentials(key)? {
                Some((user, pass)) => Ok(RegistryAuth::Basic(user, pass)),
                None => Ok(RegistryAuth::Anonymous),
            },
            None => Ok(RegistryAuth::Anonymous),
        }
    }
}

impl AuthEntry {
    fn credentials(&self, registry: &str) -> Result<Option<(String, String)>, OciError> {
        if let Some(auth) = &self.auth {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|e| {
                    OciError::InvalidDockerConfig(format!(
                        "auths.{registry:?}.auth is not base64: {e}"
                    ))
                })?;
            let text = String::from_utf8(decoded).map_err(|_| {
                OciError::InvalidDockerConfig(format!("auths.{registry:?}.auth is not UTF-8"))
            })?;
            let (user, pass) = text.split_once(':').ok_or_else(|| {
                OciError::InvalidDockerConfig(format!(
                    "auths.{registry:?}.auth must decode to USER:PASSWORD"
                ))
            })?;
            return Ok(Some((user.to_string(), pass.to_string())));
        }
        match (&self.username, &self.password) {
            (Some(u), Some(p)) => Ok(Some((u.clone(), p.clone()))),
            _ => Ok(None),
        }
    }
}

/// Docker config keys may be URLs (`https://index.docker.io/v1/`); compare
/// by `host[:port]`.
fn registry_key(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auth_and_username_password_entries() {
        let json = br#"{"auths": {
            "127.0.0.1:5000": {"auth": "YWxpY2U6czNjcjN0"},
            "https://registry.example.com/v1/": {"username": "bob", "password": "pw"}
        }}"#;
        let config = DockerConfig::from_json(json).unwrap();
        match config.auth_for("127.0.0.1:5000").unwrap() {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("alice", "s3cr3t")),
            other => panic!("expected basic auth, got {other:?}"),
        }
        match config.auth_for("registry.example.com").unwrap() {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("bob", "pw")),
            other => panic!("expected basic auth, got {other:?}"),
        }
        assert!(matches!(
            config.auth_for("other:1").unwrap(),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn rejects_a_broken_auth_entry() {
        let err = DockerConfig::from_json(br#"{"auths": {"r:1": {"auth": "bm9jb2xvbg=="}}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("USER:PASSWORD"), "{err}");
        let debug = format!("{:?}", DockerConfig::basic("r:1", "u", "secret"));
        assert!(!debug.contains("secret"), "{debug}");
    }
}
