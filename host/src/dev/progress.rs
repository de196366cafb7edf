//! Progress display for long dev-mode steps: an indicatif spinner on a
//! terminal, plain log lines otherwise (indicatif hides itself when stderr is
//! not a terminal, so the log line keeps CI output readable).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// One long-running step shown to the user.
pub struct Step {
    bar: ProgressBar,
    message: String,
}

impl Step {
    /// Starts a spinner labelled `message`.
    pub fn start(message: impl Into<String>) -> Step {
        let message = message.into();
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner:.cyan} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(message.clone());
        bar.enable_steady_tick(Duration::from_millis(100));
        tracing::info!("{message}");
        Step { bar, message }
    }

    /// Ends the step successfully with a short result.
    pub fn done(self, result: impl AsRef<str>) {
        let result = result.as_ref();
        self.bar
            .finish_with_message(format!("✓ {}: {result}", self.message));
        tracing::info!("{}: {result}", self.message);
    }

    /// Ends the step with a failure (the caller reports the error itself).
    pub fn failed(self) {
        self.bar.abandon_with_message(format!("✗ {}", self.message));
    }
}
