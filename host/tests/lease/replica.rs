//! One replica of the host as a child process, and what the tests read
//! about the election.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support;

/// The generous deadline of every wait.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// The fencing-token annotation the host writes on primaries.
pub const TOKEN: &str = "wasm-operator.dev/fencing-token";

/// One `wasm-operator run --leader-elect` process; killed when dropped.
pub struct Replica {
    /// Its name: the holder identity's prefix (`POD_NAME`).
    pub name: String,
    child: Option<Child>,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// Its /metrics and /readyz port.
    pub port: u16,
}

/// What a replica is started with.
pub struct Launch<'a> {
    /// `POD_NAME`: the prefix of its holder identity.
    pub name: &'a str,
    pub kubeconfig: &'a Path,
    /// The Lease's namespace and name.
    pub namespace: &'a str,
    pub lease: &'a str,
    /// The host version it claims (the hidden `--host-version`).
    pub version: Option<&'a str>,
    /// Where its logs and compile cache go.
    pub dir: &'a Path,
    /// `--shards` (1: one leader).
    pub shards: u16,
}

impl<'a> Launch<'a> {
    /// Replica `name` electing on Lease `namespace/lease` through
    /// `kubeconfig`, this binary's version, one shard.
    pub fn new(
        name: &'a str,
        kubeconfig: &'a Path,
        namespace: &'a str,
        lease: &'a str,
        dir: &'a Path,
    ) -> Launch<'a> {
        Launch {
            name,
            kubeconfig,
            namespace,
            lease,
            version: None,
            dir,
            shards: 1,
        }
    }

    /// The same, claiming host `version`.
    pub fn with_version(self, version: &'a str) -> Launch<'a> {
        Launch {
            version: Some(version),
            ..self
        }
    }

    /// The same, with `--shards shards`.
    pub fn with_shards(self, shards: u16) -> Launch<'a> {
        Launch { shards, ..self }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

impl Replica {
    /// Starts a replica serving the webapp plugin with short election
    /// timings.
    pub fn start(launch: &Launch<'_>) -> Replica {
        let wasm = support::plugin_wasm("webapp");
        let log = launch.dir.join(format!("{}.log", launch.name));
        let file = std::fs::File::create(&log).expect("create the replica's log");
        let port = free_port();
        // The Lease's namespace is the host's: the webapps in it are served
        // only because the grant names it (a default grant does not reach it).
        let grant = launch.dir.join(format!("{}-grant.yaml", launch.name));
        std::fs::write(&grant, format!("namespaces: [{}]\n", launch.namespace))
            .expect("write the replica's grant");
        let mut command = Command::new(env!("CARGO_BIN_EXE_wasm-operator"));
        command
            .args(["run", "--plugin", wasm.to_str().expect("utf-8 path")])
            .arg("--grant")
            .arg(&grant)
            .arg("--kubeconfig")
            .arg(launch.kubeconfig)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--cache-dir")
            .arg(support::compile_cache_dir())
            .args([
                "--leader-elect",
                "--leader-election-namespace",
                launch.namespace,
            ])
            .args(["--leader-election-id", launch.lease])
            .args(["--lease-duration", "3s", "--renew-deadline", "2s"])
            .args(["--retry-period", "500ms", "--shutdown-grace", "15"])
            .args(["--shards", &launch.shards.to_string()])
            .env("RUST_LOG", "info")
            .env("POD_NAME", launch.name)
            .env_remove("POD_NAMESPACE")
            .env_remove("WASM_OPERATOR_HOST_VERSION")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        if let Some(version) = launch.version {
            command.args(["--host-version", version]);
        }
        let child = command.spawn().expect("start wasm-operator run");
        Replica {
            name: launch.name.to_string(),
            child: Some(child),
            log,
            port,
        }
    }

    /// Its log so far (for failure messages and audit lines).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`: no drain, no release.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the process to exit (at most the deadline);
    /// returns whether it exited successfully.
    pub async fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if tokio::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let response = reqwest::get(format!("http://127.0.0.1:{}{path}", self.port))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// Its /metrics text (`None` while it does not answer).
    pub async fn metrics(&self) -> Option<String> {
        self.get("/metrics").await.map(|(_, text)| text)
    }

    /// Its `/readyz?verbose` status and body.
    pub async fn readyz(&self) -> Option<(u16, String)> {
        self.get("/readyz?verbose").await
    }

    /// `leader_election_master_status{name=lease}`: 1 leading, 0 not.
    pub async fn leading(&self, lease: &str) -> Option<bool> {
        let metrics = self.metrics().await?;
        let value = sum(
            &metrics,
            &format!("leader_election_master_status{{name=\"{lease}\"}}"),
        );
        Some(value > 0.0)
    }

    /// Its API writes for the webapp plugin's plans, all kinds.
    pub async fn writes(&self) -> Option<f64> {
        Some(sum(&self.metrics().await?, "wasm_operator_writes_total{"))
    }

    /// Its reconciles of the webapp plugin, by result (`success`, `error`).
    pub async fn reconciles(&self, result: &str) -> Option<f64> {
        let metrics = self.metrics().await?;
        Some(sum(
            &metrics,
            &format!(
                "controller_runtime_reconcile_total{{controller=\"webapp\",result=\"{result}\"}}"
            ),
        ))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The sum of the samples whose line starts with `prefix`.
pub fn sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The Lease, if it exists.
pub async fn lease(client: &Client, namespace: &str, name: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// The Lease's holder identity (`None`: absent or released).
pub fn holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty())
}

/// The Lease's `leaseTransitions`.
pub fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

/// Waits until a replica whose name is one of `names` holds the Lease;
/// returns the Lease.
pub async fn wait_for_holder(
    client: &Client,
    namespace: &str,
    name: &str,
    names: &[&str],
) -> Lease {
    support::wait_until(
        &format!("a holder of Lease {namespace}/{name} among {names:?}"),
        DEADLINE,
        || async {
            let Some(lease) = lease(client, namespace, name).await else {
                return Err("no Lease".to_string());
            };
            let holder = holder(&lease);
            match &holder {
                Some(h) if names.iter().any(|n| h.starts_with(&format!("{n}_"))) => Ok(lease),
                _ => Err(format!("holder {holder:?}")),
            }
        },
    )
    .await
}

/// The webapp plugin's primaries in `namespace`.
pub fn webapps(client: &Client, namespace: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(namespace),
    )
}

/// Creates (or changes) WebApp `name` with `replicas`.
pub async fn apply_webapp(client: &Client, namespace: &str, name: &str, replicas: i64) {
    let webapp = json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"image": "nginx:1.27", "replicas": replicas},
    });
    webapps(client, namespace)
        .patch(
            name,
            &PatchParams::apply("lease-tests").force(),
            &Patch::Apply(&webapp),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot apply WebApp {namespace}/{name}: {e}"));
}

/// The fencing token of `obj` when it was reconciled for the generation it
/// has now (the token is the reconcile's last write, after the status);
/// otherwise what was seen instead.
pub fn reconciled_token(obj: &Value) -> Result<String, String> {
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = obj
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let token = obj
        .pointer(&format!(
            "/metadata/annotations/{}",
            TOKEN.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    match token {
        Some(token) if generation.is_some() && observed == generation => Ok(token.to_string()),
        _ => Err(format!(
            "generation {generation:?}, observedGeneration {observed:?}, fencing token {token:?}"
        )),
    }
}

/// Waits until WebApp `name` was reconciled for the generation it has now
/// and carries fencing token `expected`.
pub async fn wait_reconciled_by(client: &Client, namespace: &str, name: &str, expected: &str) {
    let api = webapps(client, namespace);
    support::wait_until(
        &format!("WebApp {namespace}/{name} reconciled with fencing token {expected}"),
        DEADLINE,
        || async {
            let obj = support::get_json(&api, name)
                .await
                .ok_or("no such WebApp".to_string())?;
            match reconciled_token(&obj) {
                Ok(token) if token == expected => Ok(()),
                Ok(token) => Err(format!("fencing token {token}")),
                Err(seen) => Err(seen),
            }
        },
    )
    .await;
}

/// Waits until WebApp `name` was reconciled for generation it has now, and
/// carries a fencing token; returns the token.
pub async fn wait_reconciled(client: &Client, namespace: &str, name: &str) -> String {
    let api = webapps(client, namespace);
    support::wait_until(
        &format!("WebApp {namespace}/{name} reconciled with a fencing token"),
        DEADLINE,
        || async {
            let obj = support::get_json(&api, name)
                .await
                .ok_or("no such WebApp".to_string())?;
            reconciled_token(&obj)
        },
    )
    .await
}

/// The fencing token on WebApp `name` now.
pub async fn token_of(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let obj = support::get_json(&webapps(client, namespace), name).await?;
    obj.pointer(&format!(
        "/metadata/annotations/{}",
        TOKEN.replace('/', "~1")
    ))
    .and_then(Value::as_str)
    .map(str::to_string)
}

/// Installs the webapp CRD.
pub async fn install_webapp_crd(client: &Client) {
    support::install_crd(client, &support::example_crd("webapp")).await;
}

/// A copy of the kubeconfig at `from` whose user authenticates with
/// `token` (the devcluster accepts any token when it has none of its own):
/// how the tests tell one replica's requests from another's.
pub fn kubeconfig_with_token(from: &Path, to: &Path, token: &str) {
    let text = std::fs::read_to_string(from).expect("read the kubeconfig");
    let mut doc: Value = serde_yaml::from_str(&text).expect("parse the kubeconfig");
    if let Some(users) = doc["users"].as_array_mut() {
        for user in users {
            user["user"] = json!({"token": token});
        }
    }
    std::fs::write(to, serde_yaml::to_string(&doc).expect("kubeconfig YAML"))
        .expect("write the kubeconfig");
}

/// Waits until WebApp `name` carries fencing token `expected`.
pub async fn wait_token(client: &Client, namespace: &str, name: &str, expected: &str) {
    support::wait_until(
        &format!("WebApp {namespace}/{name} written with fencing token {expected}"),
        DEADLINE,
        || async {
            match token_of(client, namespace, name).await {
                Some(token) if token == expected => Ok(()),
                other => Err(format!("fencing token {other:?}")),
            }
        },
    )
    .await;
}

/// Waits until `replica` answers /metrics with leadership `leading` of
/// Lease `lease`.
pub async fn wait_leading(replica: &Replica, lease: &str, leading: bool) {
    support::wait_until(
        &format!(
            "replica {} reporting leader_election_master_status {}",
            replica.name,
            u8::from(leading)
        ),
        DEADLINE,
        || async {
            match replica.leading(lease).await {
                Some(now) if now == leading => Ok(()),
                other => Err(format!("{other:?}; log:\n{}", tail(&replica.logs()))),
            }
        },
    )
    .await;
}

/// The last lines of a log, for failure messages.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The name of the replica holding `lease` among `replicas`.
pub fn holder_name<'a>(lease: &Lease, replicas: &[&'a str]) -> &'a str {
    let holder = holder(lease).unwrap_or_default();
    replicas
        .iter()
        .find(|n| holder.starts_with(&format!("{n}_")))
        .copied()
        .unwrap_or_else(|| panic!("holder {holder:?} is none of {replicas:?}"))
}
