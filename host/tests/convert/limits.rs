//! The webhook's bounds (issue 23): anything that reaches the Service can
//! call it, so a review is bounded before it is read — its size, the reviews
//! and bytes in flight, the connections, the TLS handshake and the request
//! head — and a review of millions of tiny elements costs the host its
//! bytes, not a tree of them (the peak memory of the real binary, measured).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use wasm_operator::webhook::{ConversionWebhook, ServeLimits, WebhookOptions};

use crate::support::peak::{mb, start_measured};
use crate::support::{self, wait_until};
use crate::{Fixture, webhook_options};

const DESIRED: &str = "kv.example.com/v1alpha1";

fn review(uid: &str, objects: &str) -> String {
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"{uid}","desiredAPIVersion":"{DESIRED}","objects":{objects}}}}}"#
    )
}

/// The sum of the host's counter lines starting with `series` and carrying
/// every label of `labels` (read from the registry the test's host records
/// in, as its `/metrics` would serve them).
fn counted(fx: &Fixture, series: &str, labels: &[&str]) -> f64 {
    fx.registry
        .metrics()
        .encode()
        .lines()
        .filter(|line| line.starts_with(series) && labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `wasm_operator_webhook_refusals_total{reason}`.
fn refusals(fx: &Fixture, reason: &str) -> f64 {
    counted(
        fx,
        "wasm_operator_webhook_refusals_total{",
        &[&format!(r#"reason="{reason}""#)],
    )
}

/// The DistributedKV plugin's `convert` calls so far.
fn convert_calls(fx: &Fixture) -> f64 {
    counted(
        fx,
        "wasm_operator_plugin_call_duration_seconds_count{",
        &[r#"plugin="distributedkv""#, r#"function="convert""#],
    )
}

/// A second webhook of the fixture's host with `limits`.
async fn limited(fx: &Fixture, limits: ServeLimits) -> ConversionWebhook {
    ConversionWebhook::start_with(
        fx.client(),
        fx.registry.clone(),
        fx.manager.webhook_board().clone(),
        WebhookOptions {
            limits,
            ..webhook_options()
        },
    )
    .await
    .unwrap()
}

fn ca_pem(webhook: &ConversionWebhook) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(webhook.ca_bundle())
        .unwrap()
}

/// An HTTPS client trusting only the webhook's CA.
fn client(webhook: &ConversionWebhook) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem(webhook)).unwrap())
        .build()
        .unwrap()
}

/// A TLS connection to the webhook, for requests written by hand.
async fn tls_connect(webhook: &ConversionWebhook) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem(webhook).as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(webhook.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(webhook.addr().ip().into());
    connector.connect(name, tcp).await.unwrap()
}

async fn post(
    client: &reqwest::Client,
    webhook: &ConversionWebhook,
    body: String,
) -> (u16, String) {
    let response = client
        .post(format!("https://{}/convert", webhook.addr()))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_past_the_size_bound_is_refused_before_it_is_read() {
    let fx = Fixture::start().await;
    let webhook = limited(
        &fx,
        ServeLimits {
            max_review_bytes: 1 << 20,
            ..ServeLimits::default()
        },
    )
    .await;
    let client = client(&webhook);
    // Only the head, announcing 2 MiB: the refusal comes without a byte of
    // the body sent (a client writing the body may see the connection
    // closed under it, so the body is not sent at all).
    let mut tls = tls_connect(&webhook).await;
    tls.write_all(b"POST /convert HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 2097152\r\n\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut answer = Vec::new();
    // Whatever arrived before the server closed (or, bounding the test
    // only, within half a minute); the refusal is in it.
    let _ = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("announces 2097152 bytes"), "{text}");
    assert!(text.contains("at most 1048576 bytes"), "{text}");
    assert!(text.contains("--webhook-max-review-bytes"), "{text}");
    assert_eq!(refusals(&fx, "too_large"), 1.0);
    // A review within the bound is answered; tiny top-level elements are
    // refused at the first one, naming it.
    let (status, text) = post(&client, &webhook, review("small", "[0,0,0]")).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["uid"], "small");
    assert_eq!(answer["response"]["result"]["status"], "Failure");
    let message = answer["response"]["result"]["message"].as_str().unwrap();
    assert!(message.contains("request.objects[0]"), "{message}");
    assert_eq!(refusals(&fx, "object_too_large"), 0.0);
    // Within the review bound (the fixture's webhook: 32 MiB), an object
    // over the per-object bound fails the review unparsed, and counts.
    let huge = format!(
        r#"[{{"apiVersion":"kv.example.com/v1beta1","kind":"DistributedKV","metadata":{{"name":"huge","namespace":"default"}},"spec":{{"items":[{}0]}}}}]"#,
        "0,".repeat(3 << 20)
    );
    let (status, text) = post(
        &self::client(&fx.webhook),
        &fx.webhook,
        review("huge", &huge),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["uid"], "huge");
    assert_eq!(answer["response"]["result"]["status"], "Failure");
    let message = answer["response"]["result"]["message"].as_str().unwrap();
    assert!(message.contains("request.objects[0]"), "{message}");
    assert!(message.contains("objects over 4194304 bytes"), "{message}");
    assert_eq!(refusals(&fx, "object_too_large"), 1.0);
    assert_eq!(refusals(&fx, "too_large"), 1.0, "nothing else refused");
    assert_eq!(refusals(&fx, "busy"), 0.0);
}

/// A review sent without a `Content-Length` (chunked) is refused with 413
/// the moment its bytes pass the bound, and nothing of it is converted,
/// though a converting plugin is loaded and the review is a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_review_past_the_size_bound_is_refused_when_it_passes_it() {
    const MAX: usize = 64 << 10;
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;
    let webhook = limited(
        &fx,
        ServeLimits {
            max_review_bytes: MAX,
            ..ServeLimits::default()
        },
    )
    .await;
    let objects = |count: usize| {
        let objects: Vec<Value> = (0..count)
            .map(|i| crate::beta(&format!("kv-{i}"), 3, 1))
            .collect();
        serde_json::to_string(&objects).unwrap()
    };
    let body = review("chunked", &objects(1_000));
    assert!(body.len() > 2 * MAX, "{} bytes", body.len());
    let converted_before = convert_calls(&fx);
    let refused_before = refusals(&fx, "too_large");

    // The review's first MAX + 1 bytes in 4 KiB chunks, with no
    // Content-Length; the last chunk's closing CRLF is not sent, so every
    // byte sent is one the server reads to see the bound passed.
    let mut tls = tls_connect(&webhook).await;
    tls.write_all(b"POST /convert HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let sent = &body.as_bytes()[..=MAX];
    let chunks: Vec<&[u8]> = sent.chunks(4096).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(chunk);
        if i + 1 < chunks.len() {
            frame.extend_from_slice(b"\r\n");
        }
        tls.write_all(&frame).await.unwrap();
    }
    tls.flush().await.unwrap();
    let mut answer = Vec::new();
    // Whatever arrived before the server closed (or, bounding the test
    // only, within half a minute); the refusal is in it.
    let _ = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.contains(&format!("sent more than {MAX} bytes")),
        "{text}"
    );
    assert!(text.contains("--webhook-max-review-bytes"), "{text}");
    assert!(
        !text.contains("ConversionReview\","),
        "no review answer: {text}"
    );
    assert_eq!(refusals(&fx, "too_large"), refused_before + 1.0);
    assert_eq!(
        convert_calls(&fx),
        converted_before,
        "nothing of the refused review was converted"
    );

    // The same review, within the bound, is converted: the plugin was there
    // to convert, and the count above would have seen it.
    let (status, text) = post(&client(&webhook), &webhook, review("small", &objects(3))).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["uid"], "small");
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    let converted = answer["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(converted.len(), 3, "{answer}");
    assert_eq!(converted[0]["apiVersion"], DESIRED, "{answer}");
    assert_eq!(convert_calls(&fx), converted_before + 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_beyond_the_in_flight_bound_are_refused_with_503() {
    let fx = Fixture::start().await;
    let webhook = limited(
        &fx,
        ServeLimits {
            max_reviews_in_flight: 1,
            ..ServeLimits::default()
        },
    )
    .await;
    let client = client(&webhook);
    // A review that announces its body and sends only its first byte holds
    // the one slot.
    let mut holder = tls_connect(&webhook).await;
    holder
        .write_all(b"POST /convert HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
        .await
        .unwrap();
    holder.flush().await.unwrap();
    let refused = wait_until("a review refused with 503", Duration::from_secs(60), || {
        let client = client.clone();
        let webhook = webhook.clone();
        async move {
            let (status, text) = post(&client, &webhook, review("second", "[]")).await;
            if status == 503 {
                Ok(text)
            } else {
                Err(format!("{status}: {text}"))
            }
        }
    })
    .await;
    assert!(refused.contains("answering 1 reviews already"), "{refused}");
    assert_eq!(refusals(&fx, "busy"), 1.0, "the one 503 counted");
    assert_eq!(refusals(&fx, "too_large"), 0.0);
    // The slot comes back when the holder goes away.
    drop(holder);
    let answered = wait_until("a review answered again", Duration::from_secs(60), || {
        let client = client.clone();
        let webhook = webhook.clone();
        async move {
            let (status, text) = post(&client, &webhook, review("third", "[]")).await;
            if status == 200 {
                Ok(text)
            } else {
                Err(format!("{status}: {text}"))
            }
        }
    })
    .await;
    let answer: Value = serde_json::from_str(&answered).unwrap();
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
}

/// A flood of connections that never start TLS, and of TLS connections that
/// never send a request: the server closes every one (handshake and header
/// timeouts), and a real review is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_closed_and_do_not_stop_reviews() {
    let fx = Fixture::start().await;
    let webhook = limited(
        &fx,
        ServeLimits {
            max_connections: 16,
            handshake_timeout: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(1),
            ..ServeLimits::default()
        },
    )
    .await;
    let mut silent = Vec::new();
    for _ in 0..5 {
        silent.push(tls_connect(&webhook).await);
    }
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(TcpStream::connect(webhook.addr()).await.unwrap());
    }
    let (status, text) = post(&client(&webhook), &webhook, review("real", "[]")).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    // Every flood connection is closed by the server: a read ends (EOF or
    // reset) instead of waiting. The minute is a bound on the test only.
    let mut closed = 0;
    for mut tcp in flood {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_secs(60), tcp.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 200, "connections that never started TLS left open");
    let mut closed = 0;
    for mut tls in silent {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_secs(60), tls.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 5, "TLS connections that sent no request left open");
}

/// The real binary (`wasm-operator run --webhook-addr`): its peak resident
/// memory after a 20 MiB review of one object of 10.5 million zeros and a
/// 20 MiB review of ~190,000 small objects stays within 100 MB of the same
/// binary answering one tiny review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_memory_stays_near_idle_under_20_mib_reviews_of_tiny_elements() {
    let cluster = support::start_cluster().await;
    support::install_crd(&cluster.client(), &support::example_crd("wasmplugin")).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let http = reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let start = |name: &str| {
        let port = support::registry::free_port();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"));
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--webhook-addr", &format!("127.0.0.1:{port}")])
            .args(["--webhook-secret", &format!("default/limits-{name}")])
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", support::registry::free_port()),
            ])
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("RUST_LOG", "info")
            .env_remove("POD_NAMESPACE");
        (
            start_measured(command, &dir.path().join(format!("{name}.log"))),
            port,
        )
    };
    let ready = |port: u16, running: &crate::support::peak::Running| {
        let http = http.clone();
        let log = running.log();
        async move {
            wait_until(
                &format!("the webhook on {port} (log: {log})"),
                Duration::from_secs(120),
                || {
                    let http = http.clone();
                    async move {
                        let response = http
                            .post(format!("https://127.0.0.1:{port}/convert"))
                            .body(review("ready", "[]"))
                            .send()
                            .await
                            .map_err(|e| e.to_string())?;
                        if response.status() == 200 {
                            Ok(())
                        } else {
                            Err(response.status().to_string())
                        }
                    }
                },
            )
            .await;
        }
    };
    let (idle, port) = start("idle");
    ready(port, &idle).await;
    let idle = tokio::task::spawn_blocking(move || idle.stop())
        .await
        .unwrap();

    let (attacked, port) = start("attacked");
    ready(port, &attacked).await;
    let zeros = format!("[{}0]", "0,".repeat(10_500_000 - 1));
    let giant = format!(
        r#"[{{"apiVersion":"kv.example.com/v1beta1","kind":"DistributedKV","metadata":{{"name":"giant","namespace":"default"}},"spec":{{"items":{zeros}}}}}]"#
    );
    drop(zeros);
    let small: Vec<String> = (0..190_000)
        .map(|i| format!(r#"{{"apiVersion":"kv.example.com/v1beta1","kind":"DistributedKV","metadata":{{"name":"kv-{i}","namespace":"default"}},"spec":{{}}}}"#))
        .collect();
    let many = format!("[{}]", small.join(","));
    drop(small);
    for (uid, objects, expected) in [
        ("giant", giant, "objects over"),
        ("many", many, "no plugin loaded"),
    ] {
        let body = review(uid, &objects);
        assert!(body.len() > 20 << 20, "{uid}: {} bytes", body.len());
        let response = http
            .post(format!("https://127.0.0.1:{port}/convert"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{uid}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["response"]["uid"], uid);
        assert_eq!(
            answer["response"]["result"]["status"], "Failure",
            "{answer}"
        );
        let message = answer["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{uid}: {message}");
    }
    let attacked = tokio::task::spawn_blocking(move || attacked.stop())
        .await
        .unwrap();
    println!(
        "peak RSS: idle {:.1} MB, after two 20 MiB reviews {:.1} MB",
        mb(idle.peak_bytes),
        mb(attacked.peak_bytes)
    );
    assert!(
        attacked.peak_bytes < idle.peak_bytes + 100_000_000,
        "peak {:.1} MB under the reviews, idle {:.1} MB; log: {}",
        mb(attacked.peak_bytes),
        mb(idle.peak_bytes),
        attacked.output
    );
}
