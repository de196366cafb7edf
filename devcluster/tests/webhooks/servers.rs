//! Tiny webhook servers: plain HTTP with axum, HTTPS with rustls on a thread.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use base64::Engine as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;

/// A webhook: AdmissionReview or ConversionReview in, the answer out.
pub type Handler = fn(Value) -> Value;

/// Serves `handler` over plain HTTP on a random loopback port; returns the URL.
pub async fn serve_http(handler: Handler) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            axum::Json(handler(body))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

/// An HTTPS webhook: its URL and the `caBundle` (base64 PEM) that trusts it.
pub struct TlsHook {
    pub url: String,
    pub ca_bundle: String,
}

/// Serves `handler` over HTTPS on a random loopback port with a fresh
/// self-signed certificate for 127.0.0.1. Each connection answers one request
/// (`Connection: close`), on its own thread.
pub fn serve_https(handler: Handler) -> TlsHook {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(certified.cert.pem());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/hook", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                // A client that rejects the certificate just drops the connection.
                let _ = answer_one(config, tcp, handler);
            });
        }
    });
    TlsHook { url, ca_bundle }
}

fn answer_one(
    config: Arc<rustls::ServerConfig>,
    tcp: TcpStream,
    handler: Handler,
) -> std::io::Result<()> {
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let body = read_request_body(&mut tls)?;
    let request: Value = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    let answer = serde_json::to_vec(&handler(request)).map_err(std::io::Error::other)?;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    );
    tls.write_all(head.as_bytes())?;
    tls.write_all(&answer)?;
    tls.flush()?;
    tls.conn.send_close_notify();
    tls.flush()
}

/// Reads one HTTP/1.1 request with a content-length body and returns the body.
fn read_request_body(stream: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "request ended early",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "body ended early",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf[header_end..header_end + length].to_vec())
}
