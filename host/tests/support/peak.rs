//! The peak memory of a separate process: the real `wasm-operator` binary,
//! started by a test and asked to do something, its peak resident set read
//! from the kernel (`VmHWM` of `/proc/<pid>/status`) while it still runs,
//! after the work is done — the high-water mark only grows, so the figure
//! does not depend on timing.
//!
//! Not `wait4`'s `ru_maxrss`: Linux carries the parent's high-water mark
//! into a child across `exec` (the test process's own peak would be read).

use std::process::{Command, Stdio};

/// How a measured process ended.
#[derive(Debug)]
pub struct Measured {
    /// Its peak resident set size, in bytes.
    pub peak_bytes: u64,
    /// What it wrote to stdout and stderr.
    pub output: String,
}

/// A process started for measuring, running until [`Running::stop`].
pub struct Running {
    child: std::process::Child,
    log: std::path::PathBuf,
}

/// Starts `command` with its output in `log` (a file: nothing blocks on a
/// full pipe while the test talks to it).
pub fn start_measured(mut command: Command, log: &std::path::Path) -> Running {
    let file = std::fs::File::create(log).expect("create the process log");
    let err = file.try_clone().expect("clone the log handle");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    Running {
        child,
        log: log.to_path_buf(),
    }
}

impl Running {
    /// Its output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its peak resident memory so far, in bytes.
    pub fn peak_bytes(&self) -> u64 {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}; log: {}", self.log()));
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no VmHWM for {pid} (exited?); log: {}", self.log()));
        kib * 1024
    }

    /// Reads its peak, then stops it (SIGTERM) and reaps it. Blocking: call
    /// it from `spawn_blocking`.
    pub fn stop(mut self) -> Measured {
        let peak_bytes = self.peak_bytes();
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: `pid` is our child, not reaped yet (reaped just below).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let _ = self.child.wait();
        Measured {
            peak_bytes,
            output: self.log(),
        }
    }
}

/// Megabytes, for messages.
pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1_000_000.0
}
