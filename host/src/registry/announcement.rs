//! How the registry tells the composition root about a change of a version
//! set, and waits until it was applied.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::versions::{ServingVersions, VersionSet};

/// A change of one plugin's version set.
#[derive(Debug, Clone)]
pub enum VersionChange {
    /// A version set was created (first version) or replaced.
    Activated {
        /// The holder the plugin's controller reads; it already holds the
        /// new set.
        versions: Arc<ServingVersions>,
        /// The set that served before; `None` for the plugin's first version.
        previous: Option<Arc<VersionSet>>,
    },
    /// Nothing serves the plugin any more.
    Unloaded {
        /// The plugin's manifest name.
        plugin: String,
    },
}

/// One announced [`VersionChange`]. The registry's operation that made the
/// change returns once the announcement is acknowledged (or dropped).
#[derive(Debug)]
pub struct Announcement {
    /// What changed.
    pub change: VersionChange,
    /// Where the registry waits for [`Announcement::acknowledge`].
    pub(super) applied: oneshot::Sender<()>,
}

impl Announcement {
    /// Tells the registry the change has been applied (e.g. controllers
    /// started, swapped or stopped).
    pub fn acknowledge(self) {
        // The registry stops waiting when it is dropped; nothing to report.
        let _ = self.applied.send(());
    }
}
