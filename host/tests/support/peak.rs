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
