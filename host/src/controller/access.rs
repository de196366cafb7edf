//! Publishes what a plugin's controller cannot reach onto its
//! [`PluginAccess`]: the caches whose list or watch the API server forbids,
//! and the primaries its grant's namespaces leave out. Read from the shared
//! caches only; nothing is written to the objects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::cache::{CacheLease, CachedObject, NamespaceGate};
use crate::registry::{ServingVersions, access::outside_grant};

/// How often the caches' refusals and the grant's exclusions are looked at
/// (a cheap walk of the primary store; the status shows it at its next
/// write).
const ACCESS_CHECK: Duration = Duration::from_secs(2);

/// The refused lists and watches of `leases`, keyed by `apiVersion Kind`,
/// each as `list/watch <plural>: <the API server's message>`.
pub(super) fn forbidden_reads(leases: &[CacheLease]) -> BTreeMap<String, String> {
    leases
        .iter()
        .filter_map(|lease| {
            let message = lease.forbidden()?;
            let ar = lease.api_resource();
            Some((
                format!("{} {}", ar.api_version, ar.kind),
                format!("list/watch {}: {message}", ar.plural),
            ))
        })
        .collect()
}

/// Publishes, every [`ACCESS_CHECK`] until `shutdown`, the refused reads of
/// `leases` and the primaries of the primary store that the grant's `gate`
/// excludes.
pub(super) async fn publish(
    leases: Vec<CacheLease>,
    (primaries, gate): (Store<CachedObject>, NamespaceGate),
    versions: Arc<ServingVersions>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(ACCESS_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        versions
            .access()
            .set_forbidden_reads(forbidden_reads(&leases));
        let objects = primaries.state();
        let excluded = outside_grant(
            objects.iter().map(|obj| {
                (
                    obj.metadata.namespace.as_deref(),
                    obj.metadata.name.as_deref().unwrap_or_default(),
                )
            }),
            |namespace| gate.allows(namespace),
        );
        versions.access().set_outside_grant(excluded);
    }
}
