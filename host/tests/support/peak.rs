//! The peak memory of a separate process: the real `wasm-operator` binary,
//! run to its end, its peak resident set read from the kernel's accounting
//! of the reaped child (`wait4`'s `ru_maxrss`), not sampled — so the figure
//! is exact and does not depend on timing.

use std::io::Read as _;
use std::process::{Command, Stdio};

/// How a measured process ended.
#[derive(Debug)]
pub struct Measured {
    /// Its peak resident set size, in bytes.
    pub peak_bytes: u64,
    /// True when it exited with status 0.
    pub success: bool,
    /// What it wrote to stdout and stderr.
    pub output: String,
}

/// Runs `command` to its end (stdout and stderr captured) and returns its
/// peak resident memory. Blocking: call it from `spawn_blocking`.
pub fn run_measured(mut command: Command) -> Measured {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut output = String::new();
    let _ = stdout.read_to_string(&mut output);
    output.push_str(&err_reader.join().unwrap());
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (the `Child` is never
    // waited on); `status` and `usage` are valid for writing.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4({pid}) failed");
    // Dropping a Child neither waits nor kills: nothing touches the reaped pid.
    drop(child);
    Measured {
        // Linux reports ru_maxrss in KiB.
        peak_bytes: usage.ru_maxrss as u64 * 1024,
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        output,
    }
}

/// Megabytes, for messages.
pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1_000_000.0
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

    /// SIGTERM, then reaps it and returns its peak resident memory.
    /// Blocking: call it from `spawn_blocking`.
    pub fn stop(self) -> Measured {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: `pid` is our child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let mut status: libc::c_int = 0;
        // SAFETY: as in `run_measured`.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as in `run_measured`.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(reaped, pid, "wait4({pid}) failed");
        let output = self.log();
        Measured {
            peak_bytes: usage.ru_maxrss as u64 * 1024,
            success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            output,
        }
    }
}
