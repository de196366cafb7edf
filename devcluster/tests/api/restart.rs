//! The `devcluster` binary killed with SIGKILL and started again on the same
//! port and data file, while a kube-rs watcher stays connected and retries.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::Value;

use crate::{cm, eventually};

/// The binary, killed with SIGKILL when dropped (also when the test fails).
struct Server(Child);

impl Server {
    /// Sends SIGKILL without waiting, like `kill -9` from a shell: the
    /// process may still hold its port for a moment.
    fn signal(&mut self) {
        let _ = self.0.kill();
    }

    fn kill(&mut self) {
        let _ = self.0.kill(); // SIGKILL
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the binary and returns it with its URL (read from its first line).
fn spawn(port: u16, dir: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .arg("--port")
        .arg(port.to_string())
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg("--data")
        .arg(dir.join("state.sqlite"))
        .arg("--audit-log")
        .arg(dir.join("audit.log"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    // Keep reading: a closed pipe would fail the binary's next println.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = line
        .trim()
        .strip_prefix("devcluster serving at ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (Server(child), url)
}

fn client(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

fn rv(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_restart_on_the_same_port_and_data_keeps_objects_and_resource_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, url) = spawn(0, dir.path());
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&url), "default");

    // A kube-rs watcher that stays connected across the kill, and records what it sees.
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let watched = api.clone();
    let watching = tokio::spawn(async move {
        let mut events = watcher(watched, watcher::Config::default()).boxed();
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    let _ = tx.send(o.metadata.name.unwrap_or_default());
                }
                // Errors (the connection refused while the server is down) are retried.
                Some(Ok(_)) | Some(Err(_)) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None => return,
            }
        }
    });

    let mut last = 0;
    for i in 0..20 {
        let made = api
            .create(&PostParams::default(), &cm(&format!("before-{i}"), &[]))
            .await
            .unwrap();
        assert!(rv(&made) > last);
        last = rv(&made);
    }
    api.delete("before-0", &DeleteParams::default())
        .await
        .unwrap();
    let list = api.list(&Default::default()).await.unwrap();
    let rv_before_kill: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv_before_kill > last);
    // The watcher has caught up with the last create.
    while seen.recv().await.unwrap() != "before-19" {}

    // An open raw watch at the current resourceVersion, cut by the kill.
    let raw = api
        .watch(&WatchParams::default(), &rv_before_kill.to_string())
        .await
        .unwrap()
        .boxed();
    first.signal();

    // (a) The same port binds again at once, though the killed process may
    // not have released it yet and connections were open at the kill.
    let started = std::time::Instant::now();
    let (mut second, url2) = spawn(port, dir.path());
    first.kill();
    let ended: Vec<_> = tokio::time::timeout(Duration::from_secs(5), raw.collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(ended.iter().all(|e| !matches!(e, Ok(WatchEvent::Added(_)))));
    assert_eq!(url2, url);
    assert!(started.elapsed() < Duration::from_secs(5));

    // (c) Everything written before the kill is there.
    let list = api.list(&Default::default()).await.unwrap();
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .filter(|n| n.starts_with("before-"))
        .collect();
    names.sort();
    let mut expected: Vec<String> = (1..20).map(|i| format!("before-{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    // (b) resourceVersions go on from where they were.
    let rv_after: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(rv_after, rv_before_kill);

    // A watch resuming from the last resourceVersion gets the events after it...
    let mut resumed = api
        .watch(&WatchParams::default(), &rv_before_kill.to_string())
        .await
        .unwrap()
        .boxed();
    let made = api
        .create(&PostParams::default(), &cm("after", &[]))
        .await
        .unwrap();
    assert!(rv(&made) > rv_before_kill);
    let first_event = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), resumed.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            WatchEvent::Bookmark(b) => {
                let at: u64 = b.metadata.resource_version.parse().unwrap();
                assert!(at >= rv_before_kill);
            }
            other => break other,
        }
    };
    match first_event {
        WatchEvent::Added(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("after"));
            assert_eq!(rv(&o), rv(&made));
        }
        other => panic!("expected ADDED after, got {other:?}"),
    }
    // ...and one from before the restart's history gets 410 Gone, never a silent gap.
    let mut stale = api
        .watch(&WatchParams::default(), &(rv_before_kill - 5).to_string())
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), stale.next())
        .await
        .unwrap()
    {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }

    // The kube-rs watcher that stayed connected catches up.
    eventually(
        "the watcher sees the object created after the restart",
        || {
            let got = std::iter::from_fn(|| seen.try_recv().ok()).any(|n| n == "after");
            async move { got }
        },
    )
    .await;

    // The audit log kept every line of both processes.
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let creates = events.iter().filter(|e| e["verb"] == "create").count();
    assert_eq!(creates, 21);
    second.kill();
    watching.abort();
}
