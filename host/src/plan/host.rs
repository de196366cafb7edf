//! Plans the host makes on its own account, with no plugin answer behind
//! them: the hot-loop report, the upgrade report and the release of a
//! deleting primary outside the plugin's grant. The controller writes them
//! through the same writer as every other plan.

use std::time::Duration;

use kube::api::DynamicObject;

use super::{EventAction, FinalizerChange, Plan, PlannedEvent, Requeue, finalizer};
use crate::contract::{Manifest, Reason, ReconcileLimits};

/// The plan for a reconcile the object's rate limit delays by `wait`: on
/// the `first` delay of a streak a `HotLoop` Warning event, otherwise no
/// write; either way a look again once the wait is over.
pub fn hot_loop(plugin: &str, limits: &ReconcileLimits, wait: Duration, first: bool) -> Plan {
    let requeue = Requeue::AfterMs(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    if !first {
        return Plan::idle(requeue);
    }
    let message = format!(
        "hot loop: plugin {plugin} reconciled this object more than {} times in a row at more than one per {} ms; further reconciles are delayed. Look for a requeue-after loop or two writers fighting over the object or a child",
        limits.reconcile_burst,
        limits.reconcile_refill.as_millis()
    );
    Plan {
        events: vec![PlannedEvent::new(
            true,
            Reason::HotLoop.as_str(),
            message,
            EventAction::Reconcile,
        )],
        ..Plan::idle(requeue)
    }
}

/// The plan that reports an object upgraded from version `from` to
/// `manifest`'s: an `Upgraded` Normal event on the object as written. The
/// reconcile goes on after it, so its requeue is never read.
pub fn upgraded(manifest: &Manifest, from: &str) -> Plan {
    Plan {
        events: vec![PlannedEvent::new(
            false,
            Reason::Upgraded.as_str(),
            format!(
                "{} upgraded this object from {from} to {}",
                manifest.name, manifest.version
            ),
            EventAction::Upgrade,
        )],
        ..Plan::idle(Requeue::AwaitChange)
    }
}

/// The plan for a primary outside the plugin's grant: nothing, unless it is
/// being deleted and still holds the host's finalizer (added before the
/// grant narrowed); then the finalizer is removed, without `finalize` and
/// without an event, so nothing is left Terminating.
pub fn outside_grant(primary: &DynamicObject) -> Plan {
    let release = primary.metadata.deletion_timestamp.is_some() && finalizer::holds(primary);
    Plan {
        finalizer: if release {
            FinalizerChange::Remove
        } else {
            FinalizerChange::Unchanged
        },
        ..Plan::idle(Requeue::AwaitChange)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::plan::FINALIZER;
    use crate::plan::test_support::{manifest, primary, with_finalizers};

    fn limits() -> ReconcileLimits {
        ReconcileLimits {
            reconcile_burst: 5,
            reconcile_refill: Duration::from_millis(200),
            ..ReconcileLimits::default()
        }
    }

    #[test]
    fn the_first_delay_of_a_hot_loop_records_one_warning() {
        let plan = hot_loop("webapp", &limits(), Duration::from_millis(150), true);
        assert_eq!(plan.requeue, Requeue::AfterMs(150));
        assert_eq!(plan.events.len(), 1);
        let event = &plan.events[0];
        assert!(event.warning);
        assert_eq!(event.reason, "HotLoop");
        assert_eq!(event.action, EventAction::Reconcile);
        assert_eq!(
            event.message,
            "hot loop: plugin webapp reconciled this object more than 5 times in a row at more than one per 200 ms; further reconciles are delayed. Look for a requeue-after loop or two writers fighting over the object or a child"
        );
        assert!(plan.status.is_none() && plan.finalizer == FinalizerChange::Unchanged);
    }

    #[test]
    fn later_delays_of_a_hot_loop_write_nothing() {
        let plan = hot_loop("webapp", &limits(), Duration::from_millis(40), false);
        assert!(plan.is_noop());
        assert_eq!(plan.requeue, Requeue::AfterMs(40));
    }

    #[test]
    fn an_upgrade_is_reported_by_a_normal_event() {
        let plan = upgraded(&manifest(), "1.1.0");
        assert_eq!(plan.events.len(), 1);
        let event = &plan.events[0];
        assert!(!event.warning);
        assert_eq!(event.reason, "Upgraded");
        assert_eq!(event.action, EventAction::Upgrade);
        assert_eq!(
            event.message,
            "webapp upgraded this object from 1.1.0 to 1.2.0"
        );
        assert!(plan.status.is_none() && plan.annotations.is_empty());
    }

    #[test]
    fn outside_the_grant_only_a_deleting_primary_holding_the_finalizer_is_released() {
        let deleting = |mut obj: DynamicObject| {
            obj.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            obj
        };
        let held = deleting(with_finalizers(primary(), &[FINALIZER]));
        let plan = outside_grant(&held);
        assert_eq!(plan.finalizer, FinalizerChange::Remove);
        assert!(plan.events.is_empty() && plan.status.is_none());
        assert_eq!(plan.requeue, Requeue::AwaitChange);

        for untouched in [
            primary(),
            with_finalizers(primary(), &[FINALIZER]),
            deleting(with_finalizers(primary(), &["someone.else/finalizer"])),
        ] {
            assert!(outside_grant(&untouched).is_noop());
        }
    }
}
