//! A loopback TCP proxy per replica: the harness cuts, slows or restores the
//! link between one host replica and the API server, as a network would.
//!
//! # How a fault looks to the replica
//!
//! - [`Link::Cut`]: a partition. Bytes the replica sends are read and held;
//!   nothing is delivered either way and new connections are accepted but
//!   not connected upstream, so requests hang (they are not refused) until
//!   the link is restored, when everything held is delivered in order. That
//!   is what a replica sees when a switch drops its packets and TCP
//!   retransmits later, and it is what makes a write sent before a
//!   partition arrive after it.
//! - [`Link::Slow`]: every chunk is delivered `latency` after it was read,
//!   both ways (latency, not a bandwidth limit).
//!
//! Each replica's upstream connections leave from its own loopback source
//! address (`127.0.0.<10 + index>`), so the API server's audit log names
//! the replica of every write (`sourceIPs`).
//!
//! # Guarantees
//! - Bytes are never dropped or reordered; a connection ends when either
//!   side closes it.
//! - Every chunk the replica sent that was delivered more than
//!   [`DELAY_RECORDED`] after it was read is recorded ([`Proxy::delays`]):
//!   the check tells a write delayed in flight from one sent late.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};

/// A delivery at least this late is recorded as a delay.
pub const DELAY_RECORDED: Duration = Duration::from_millis(200);

/// The state of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Bytes flow at once.
    Open,
    /// Nothing flows; bytes are held until the link opens.
    Cut,
    /// Every chunk is delivered this long after it was read.
    Slow(Duration),
}

/// A chunk from the replica delivered late: when it was read and when it was delivered.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Delay {
    /// When the proxy read it from the replica (wall clock).
    #[serde(with = "crate::observe::system_time")]
    pub sent: SystemTime,
    /// When the proxy wrote it to the API server.
    #[serde(with = "crate::observe::system_time")]
    pub delivered: SystemTime,
}

/// One replica's proxy (its accept loop stops when this is dropped).
pub struct Proxy {
    /// The port the replica connects to (127.0.0.1).
    pub port: u16,
    /// The source address of its upstream connections.
    pub source: IpAddr,
    link: watch::Sender<Link>,
    delays: Arc<Mutex<Vec<Delay>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// A proxy to `upstream` for replica `index`, listening on a free port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(index: u8, upstream: SocketAddr) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + index));
        let (link, _) = watch::channel(Link::Open);
        let delays = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let link = link.clone();
            let delays = delays.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let link = link.subscribe();
                    let delays = delays.clone();
                    tokio::spawn(async move {
                        let _ = serve(client, upstream, source, link, delays).await;
                    });
                }
            })
        };
        Ok(Proxy {
            port,
            source,
            link,
            delays,
            accept,
        })
    }

    /// Sets the link's state; held bytes flow when it opens again.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }

    /// Every late delivery of the replica's bytes so far.
    pub fn delays(&self) -> Vec<Delay> {
        self.delays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Waits until the link is not cut; returns the latency to add.
async fn passable(link: &mut watch::Receiver<Link>) -> Option<Duration> {
    let state = *link.wait_for(|l| *l != Link::Cut).await.ok()?;
    Some(match state {
        Link::Slow(latency) => latency,
        _ => Duration::ZERO,
    })
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    source: IpAddr,
    mut link: watch::Receiver<Link>,
    delays: Arc<Mutex<Vec<Delay>>>,
) -> std::io::Result<()> {
    // A partitioned replica's new connections hang, as SYNs would.
    passable(&mut link).await;
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    let server = socket.connect(upstream).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        link.clone(),
        Some(delays.clone()),
    );
    let down = pump(server_read, client_write, link, None);
    // Either direction ending ends the connection (as a proxy would).
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    Ok(())
}

/// Copies `from` to `to`, reading continuously (each chunk stamped when
/// read) and writing when the link lets it.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    delays: Option<Arc<Mutex<Vec<Delay>>>>,
) {
    let (tx, mut rx) = mpsc::channel::<(SystemTime, tokio::time::Instant, Vec<u8>)>(256);
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let stamp = (SystemTime::now(), tokio::time::Instant::now());
                    if tx
                        .send((stamp.0, stamp.1, buf[..n].to_vec()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((sent, read_at, bytes)) = rx.recv().await {
            let Some(latency) = passable(&mut link).await else {
                break;
            };
            tokio::time::sleep_until(read_at + latency).await;
            // A cut may have started while sleeping.
            if passable(&mut link).await.is_none() {
                break;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
            if let Some(delays) = &delays
                && read_at.elapsed() >= DELAY_RECORDED
            {
                delays
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Delay {
                        sent,
                        delivered: SystemTime::now(),
                    });
            }
        }
        let _ = to.shutdown().await;
    };
    // The writer drains what the reader queued before the end.
    tokio::join!(reader, writer);
}
