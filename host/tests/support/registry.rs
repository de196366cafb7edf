//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry 2.8) on 127.0.0.1 with a random port and a
//! temporary storage directory, killed when dropped.
//!
//! Installed by `scripts/install-test-deps.sh`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry. Pushes and pulls go to [`Registry::host`].
pub struct Registry {
    child: Child,
    port: u16,
    log: PathBuf,
    credentials: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts an anonymous registry.
    pub fn start() -> Registry {
        Self::launch(None)
    }

    /// Starts a registry that requires HTTP basic auth with `username` /
    /// `password` (htpasswd file, bcrypt, made by apache2-utils' `htpasswd`).
    pub fn start_with_auth(username: &str, password: &str) -> Registry {
        Self::launch(Some((username.to_string(), password.to_string())))
    }

    fn launch(credentials: Option<(String, String)>) -> Registry {
        let binary = which("docker-registry").unwrap_or_else(|| {
            panic!("docker-registry is not installed: run scripts/install-test-deps.sh")
        });
        // The port is chosen by binding :0 and released for the registry; a
        // rare collision with another test shows up as an early exit, and
        // then the start is retried on another port.
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir for the registry");
            let port = free_port();
            let mut config = format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            );
            if let Some((user, pass)) = &credentials {
                let htpasswd = dir.path().join("htpasswd");
                let out = Command::new(which("htpasswd").unwrap_or_else(|| {
                    panic!("htpasswd (apache2-utils) is not installed: run scripts/install-test-deps.sh")
                }))
                .args(["-Bbn", user, pass])
                .output()
                .expect("run htpasswd");
                assert!(out.status.success(), "htpasswd failed: {out:?}");
                std::fs::write(&htpasswd, &out.stdout).expect("write htpasswd file");
                config.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: wasm-operator-test\n    path: {}\n",
                    htpasswd.display()
                ));
            }
            let config_path = dir.path().join("config.yml");
            std::fs::write(&config_path, config).expect("write registry config");
            let log = dir.path().join("registry.log");
            let log_file = std::fs::File::create(&log).expect("registry log file");
            let child = Command::new(&binary)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().expect("clone log handle"))
                .stderr(log_file)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
            let mut registry = Registry {
                child,
                port,
                log,
                credentials: credentials.clone(),
                _dir: dir,
            };
            if registry.wait_ready() {
                return registry;
            }
        }
        panic!("docker-registry did not start on 5 ports in a row");
    }

    /// Waits until `/v2/` answers; false if the process exited (port taken).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Some(status) = self.v2_status() {
                // 401 is the expected answer of an auth-enabled registry.
                if status == 200 || (status == 401 && self.credentials.is_some()) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "docker-registry on port {} did not answer /v2/ within 20 s; log:\n{}",
            self.port,
            self.log_text()
        );
    }

    fn v2_status(&self) -> Option<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream
            .write_all(b"GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        response.split_whitespace().nth(1)?.parse().ok()
    }

    /// `127.0.0.1:PORT`: the registry part of references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.host())
    }

    /// `127.0.0.1:PORT/REPO`.
    pub fn reference(&self, repo_and_tag: &str) -> String {
        format!("{}/{repo_and_tag}", self.host())
    }

    /// The credentials of an auth-enabled registry.
    pub fn credentials(&self) -> Option<(String, String)> {
        self.credentials.clone()
    }

    /// What the registry logged so far (for failure messages).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}
