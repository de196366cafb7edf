//! Helpers shared by the CLI tests: locating (and building once) the plugins,
//! running the binary, waiting for conditions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The path of the built binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_wasm-operator")
}

static BUILD: Mutex<bool> = Mutex::new(false);

/// The release component of plugin `name`, built once per test process if it
/// is missing (`scripts/build-plugins.sh`, like CI does).
pub fn plugin_wasm(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let path = target
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{name}.wasm"));
    let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !path.is_file() && !*built {
        let status = Command::new("bash")
            .arg(workspace().join("scripts").join("build-plugins.sh"))
            .current_dir(workspace())
            .status()
            .expect("run scripts/build-plugins.sh");
        assert!(status.success(), "building the plugins failed");
        *built = true;
    }
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Runs the binary to completion with `args`.
pub fn run_binary(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("run wasm-operator")
}

/// `wasm-operator run --plugin WASM --kubeconfig KUBECONFIG` with
/// `RUST_LOG=info`; callers add the rest (`--metrics-addr`, `-n`, ...).
pub fn run_plugin_command(wasm: &Path, kubeconfig: &Path) -> Command {
    let mut command = Command::new(binary());
    command
        .args(["run", "--plugin", wasm.to_str().unwrap()])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .env("RUST_LOG", "info");
    command
}

/// Starts `command` with stdout discarded and stderr written to `log` (what
/// a failing test prints); the process is killed when the guard drops.
pub fn spawn_logged(command: &mut Command, log: &Path) -> ChildGuard {
    let file = std::fs::File::create(log)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
    let child = command
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
    ChildGuard(Some(child))
}

/// A child process killed when dropped, so a failing test leaves nothing behind.
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// Sends SIGTERM and waits for the process to exit; returns whether it
    /// exited successfully.
    pub fn terminate(mut self) -> bool {
        let mut child = self.0.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..600 {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `check` every 200 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub use crate::support::with_custom_section;
