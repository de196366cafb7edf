//! The container image (`scripts/build-image.sh`) for tests: built, pushed,
//! unpacked with umoci like a container runtime would, and its binary run
//! **inside** the unpacked root filesystem as the image's user.
//!
//! - [`image_rootfs`]: the image built from this checkout, unpacked once per
//!   test process (under `target/image/unpacked/<pid>`).
//! - [`build_image`]: runs the script with extra arguments (e.g. `--push`).
//! - [`unpack_from_registry`]: pulls an image with skopeo and unpacks it.
//! - [`image_command`] / [`path_in_image`]: a `Command` running a program of
//!   the image in its rootfs, and how that program names a file of it.
//!
//! Running inside: as root (here and in CI) `chroot --userspec` with the
//! image's user and environment from the bundle's `config.json` (what umoci
//! derived from the image config). Not root: the rootfs's own loader with
//! `--library-path` (the image's libraries, not the host's), the image's
//! environment, the host's file system.
//!
//! Needs umoci and skopeo (scripts/install-test-deps.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use super::workspace;

/// The loader the image's binary is linked against (its ELF interpreter).
const LOADER: &str = "lib64/ld-linux-x86-64.so.2";
/// Where the image keeps the libraries the loader needs.
const LIBRARIES: &str = "lib/x86_64-linux-gnu";

/// Runs `scripts/build-image.sh` with `args` and returns what it printed;
/// panics with its output when it fails.
pub fn build_image(args: &[&str]) -> String {
    let output = Command::new("bash")
        .arg(workspace().join("scripts").join("build-image.sh"))
        .args(args)
        .current_dir(workspace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/build-image.sh: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "scripts/build-image.sh {args:?} failed ({}):\n{text}",
        output.status
    );
    text
}

/// The image built from this checkout (`scripts/build-image.sh`), unpacked
/// for this test process: the path of its root filesystem. Built and
/// unpacked on the first call; later calls return the same path. Other test
/// processes may rebuild `target/image` meanwhile: this copy stays as it is.
pub fn image_rootfs() -> PathBuf {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            build_image(&[]);
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace().join("target"));
            let unpacked = target.join("image").join("unpacked");
            remove_stale(&unpacked);
            let bundle = unpacked.join(std::process::id().to_string());
            let _ = std::fs::remove_dir_all(&bundle);
            std::fs::create_dir_all(&unpacked).expect("create target/image/unpacked");
            // The layout is swapped by concurrent builds: read it under their lock.
            let layout = target.join("image").join("oci");
            run(Command::new("flock")
                .arg(target.join("image.lock"))
                .args(["umoci", "unpack", "--rootless", "--image"])
                .arg(format!(
                    "{}:{}",
                    layout.display(),
                    env!("CARGO_PKG_VERSION")
                ))
                .arg(&bundle));
            bundle.join("rootfs")
        })
        .clone()
}

/// Bundles unpacked by test processes that have exited.
fn remove_stale(unpacked: &Path) {
    let Ok(entries) = std::fs::read_dir(unpacked) else {
        return;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().to_string();
        if !Path::new("/proc").join(&pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Copies the image at `reference` (an insecure/loopback registry) into an
/// OCI layout under `dir` with skopeo and unpacks it there with umoci, as a
/// runtime would; returns the root filesystem (`dir/bundle/rootfs`).
pub fn unpack_from_registry(reference: &str, dir: &Path) -> PathBuf {
    let layout = dir.join("oci");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("oci:{}:image", layout.display())));
    let bundle = dir.join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--rootless", "--image"])
        .arg(format!("{}:image", layout.display()))
        .arg(&bundle));
    bundle.join("rootfs")
}

/// The runtime configuration umoci wrote next to `rootfs` (an OCI runtime
/// spec derived from the image config: `process.user`, `.env`, `.args`).
pub fn runtime_config(rootfs: &Path) -> Value {
    let path = rootfs
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent bundle", rootfs.display()))
        .join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether [`image_command`] runs programs in a chroot (as root) rather
/// than through the image's loader on the host's file system.
pub fn runs_in_chroot() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// How a program of the image running through [`image_command`] names
/// `inside` (an absolute path in the image, e.g. `/tmp/kubeconfig`).
pub fn path_in_image(rootfs: &Path, inside: &str) -> String {
    if runs_in_chroot() {
        inside.to_string()
    } else {
        rootfs
            .join(inside.trim_start_matches('/'))
            .display()
            .to_string()
    }
}

/// A command running the image's entrypoint with `args` (instead of the
/// image's cmd) inside `rootfs`, as the image's user with only the image's
/// environment (see the module comment for how).
pub fn image_command(rootfs: &Path, args: &[&str]) -> Command {
    let config = runtime_config(rootfs);
    let process = &config["process"];
    let entrypoint = process["args"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no process.args in the bundle of {}", rootfs.display()));
    let mut command = if runs_in_chroot() {
        let uid = process["user"]["uid"].as_u64().unwrap_or(0);
        let gid = process["user"]["gid"].as_u64().unwrap_or(0);
        // By absolute path: with the image's environment, Command would
        // look the program up on the image's PATH.
        let mut command = Command::new(host_program("chroot"));
        command
            .arg(format!("--userspec={uid}:{gid}"))
            .arg(format!("--groups={gid}"))
            .arg(rootfs)
            .arg(entrypoint);
        command
    } else {
        let mut command = Command::new(rootfs.join(LOADER));
        command
            .arg("--library-path")
            .arg(rootfs.join(LIBRARIES))
            .arg(rootfs.join(entrypoint.trim_start_matches('/')));
        command
    };
    command.args(args).env_clear();
    for pair in process["env"].as_array().into_iter().flatten() {
        if let Some((name, value)) = pair.as_str().and_then(|p| p.split_once('=')) {
            command.env(name, value);
        }
    }
    command
}

/// The host's `name` program, from PATH or the system directories.
fn host_program(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed (coreutils)"))
}

/// Runs `command`; panics with its output when it fails.
pub fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Copies `from` to `to` (a path in an unpacked rootfs) readable by every
/// user: the image's user (65532) reads it, and a kubeconfig is 0600.
pub fn copy_readable(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o644)).unwrap();
}
