//! `wasm-operator plugin inspect` on the real webapp plugin and on junk.

use crate::common::{plugin_wasm, run_binary};

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn check_inspection(value: &serde_json::Value) {
    assert_eq!(value["manifest"]["name"], "webapp");
    assert_eq!(value["manifest"]["primary"]["kind"], "WebApp");
    assert_eq!(value["manifest"]["primary"]["group"], "example.com");
    let world = serde_json::to_string(&value["world"]).unwrap();
    assert!(
        world.contains("wasm-operator:plugin/reconciler"),
        "world does not mention the reconciler interface: {world}"
    );
    assert!(value["digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn inspect_prints_manifest_as_json() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&["plugin", "inspect", wasm.to_str().unwrap(), "-o", "json"]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    check_inspection(&value);
}

#[test]
fn inspect_prints_manifest_as_yaml() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&[
        "plugin",
        "inspect",
        wasm.to_str().unwrap(),
        "--output",
        "yaml",
    ]);
    let value: serde_json::Value = serde_yaml::from_str(&stdout(&output)).unwrap();
    check_inspection(&value);
}

#[test]
fn inspect_text_is_a_summary_then_the_world() {
    let wasm = plugin_wasm("webapp");
    let text = stdout(&run_binary(&["plugin", "inspect", wasm.to_str().unwrap()]));
    assert!(text.contains("Name:           webapp"), "{text}");
    assert!(
        text.contains("Primary kind:   WebApp (example.com/v1, webapps)"),
        "{text}"
    );
    assert!(text.contains("Deployment (apps/v1, deployments)"), "{text}");
    let world = text.find("World:").expect("a World section");
    assert!(
        text[world..].contains("wasm-operator:plugin/reconciler"),
        "{text}"
    );
}

#[test]
fn inspect_rejects_a_file_that_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.wasm");
    std::fs::write(&junk, b"this is not WebAssembly").unwrap();
    let output = run_binary(&["plugin", "inspect", junk.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("notes.wasm"), "{stderr}");
    assert!(stderr.contains("is not a wasm-operator plugin"), "{stderr}");
}

#[test]
fn inspect_names_a_missing_file() {
    let output = run_binary(&["plugin", "inspect", "/nonexistent/plugin.wasm"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read plugin file /nonexistent/plugin.wasm"),
        "{stderr}"
    );
}

#[test]
fn inspect_reads_a_gzipped_component_like_the_plain_one() {
    use std::io::Write as _;
    let wasm = plugin_wasm("webapp");
    let plain = stdout(&run_binary(&[
        "plugin",
        "inspect",
        wasm.to_str().unwrap(),
        "-o",
        "json",
    ]));
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("webapp.wasm.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&std::fs::read(&wasm).unwrap()).unwrap();
    std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
    let gzipped = stdout(&run_binary(&[
        "plugin",
        "inspect",
        gz.to_str().unwrap(),
        "-o",
        "json",
    ]));
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    let gzipped: serde_json::Value = serde_json::from_str(&gzipped).unwrap();
    check_inspection(&gzipped);
    assert_eq!(
        plain["digest"], gzipped["digest"],
        "the component's digest, not the file's"
    );
}

#[test]
fn inspect_refuses_broken_or_oversized_gzip_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.wasm.gz");
    std::fs::write(&broken, b"\x1f\x8b\x08\0garbage that is not deflate").unwrap();
    let output = run_binary(&["plugin", "inspect", broken.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("broken.wasm.gz") && stderr.contains("does not decompress"),
        "{stderr}"
    );
    // A gzip bomb: 300 MiB of zeros in a few hundred KiB; decompression
    // stops at the bound (256 MiB) and says so.
    let bomb = dir.path().join("bomb.wasm.gz");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c 314572800 /dev/zero | gzip -1 > {}",
            bomb.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let output = run_binary(&["plugin", "inspect", bomb.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bomb.wasm.gz")
            && stderr.contains("decompresses to more than 268435456 bytes"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_an_oci_reference_and_shows_both_digests() {
    let registry = crate::support::registry::Registry::start();
    let reference = registry.reference("cli/webapp:1.0.0");
    let bytes = std::fs::read(plugin_wasm("webapp")).unwrap();
    let pushed = wasm_operator::oci::push(
        &bytes,
        &reference,
        &wasm_operator::oci::PushOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap();
    let positional = format!("oci://{reference}");
    let output = tokio::task::spawn_blocking(move || {
        run_binary(&["plugin", "inspect", &positional, "-o", "json"])
    })
    .await
    .unwrap();
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    check_inspection(&value);
    assert_eq!(value["digest"], pushed.layer_digest.as_str());
    assert_eq!(value["ociManifestDigest"], pushed.digest.as_str());
    let flag = reference.clone();
    let output =
        tokio::task::spawn_blocking(move || run_binary(&["plugin", "inspect", "--oci", &flag]))
            .await
            .unwrap();
    let text = stdout(&output);
    assert!(
        text.contains(&format!("OCI digest:     {}", pushed.digest)),
        "{text}"
    );
}

/// Output piped into a reader that stops early ends the command quietly,
/// as for kubectl (`wasm-operator plugin inspect … | head`): killed by
/// SIGPIPE, nothing on stderr, no panic.
#[test]
fn a_reader_that_stops_early_ends_the_output_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let wasm = plugin_wasm("webapp");
    let mut child = Command::new(crate::common::binary())
        .args(["plugin", "inspect", wasm.to_str().unwrap(), "-o", "yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the first line.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.signal(),
        Some(13),
        "{:?}: {stderr}",
        output.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
