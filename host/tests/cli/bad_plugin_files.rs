//! `run --plugin PATH` (and `plugin inspect`) read regular files only, of a bounded size: a
//! device, a FIFO or a directory is refused by name before anything is
//! read or any cluster is contacted.

use crate::common::run_binary;

fn refused(path: &str, part: &str) {
    let output = run_binary(&[
        "run",
        "--plugin",
        path,
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert!(!output.status.success(), "{path} was accepted");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(path), "{stderr}");
    assert!(stderr.contains(part), "{stderr}");
    assert!(stderr.contains("check the --plugin path"), "{stderr}");
}

#[test]
fn run_refuses_devices_fifos_directories_and_oversized_files() {
    refused("/dev/zero", "is a character device, not a regular file");
    let dir = tempfile::tempdir().unwrap();
    refused(
        dir.path().to_str().unwrap(),
        "is a directory, not a regular file",
    );
    let fifo = dir.path().join("pipe.wasm");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    refused(
        fifo.to_str().unwrap(),
        "is a FIFO (named pipe), not a regular file",
    );
    let huge = dir.path().join("huge.wasm");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(wasm_operator::wasmplugin::source::MAX_COMPONENT_BYTES + 1)
        .unwrap();
    refused(huge.to_str().unwrap(), "is larger than");
}

#[test]
fn plugin_inspect_refuses_a_device() {
    let output = run_binary(&["plugin", "inspect", "/dev/zero"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/dev/zero is a character device, not a regular file"),
        "{stderr}"
    );
}
