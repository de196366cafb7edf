//! Waiting for the signals that ask the process to stop: Ctrl-C (SIGINT) and,
//! on Unix, SIGTERM (what Kubernetes sends before killing a pod).

/// Resolves when SIGINT or SIGTERM arrives. Handlers are installed before the
/// future is returned, so a signal that arrives right after is not lost.
pub fn shutdown_signal() -> Result<impl Future<Output = &'static str>, std::io::Error> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    #[cfg(unix)]
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    Ok(async move {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    })
}
