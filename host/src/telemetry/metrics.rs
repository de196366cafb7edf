//! The Prometheus registry and every metric family the host records.

mod admission;
mod backup;

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Outcome label of `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// The plan was carried out; the object is reconciled again when it
    /// changes or at the resync.
    Success,
    /// The call or a write failed; the object is retried with backoff.
    Error,
    /// The plan was carried out and the plugin asked to be called again
    /// after a delay (`requeue_after_ms`, or `finalize` still waiting).
    Requeue,
}

impl ReconcileResult {
    fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResultLabels {
    controller: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    version: String,
    function: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginNameLabels {
    plugin: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    plugin: String,
    version: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    plugin: String,
    limit: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    plugin: String,
    write: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    plugin: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    plugin: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MarkLabels {
    plugin: String,
    via: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    plugin: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardTransitionLabels {
    shard: String,
    transition: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardPluginLabels {
    plugin: String,
    shard: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseTransitionLabels {
    name: String,
    transition: String,
}

/// One kind of API write a plan makes (the `write` label of
/// `wasm_operator_writes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Server-side apply of a child.
    Apply,
    /// Deletion of a child no longer desired.
    Prune,
    /// The primary's status patch.
    Status,
    /// The primary's version-mark annotations.
    Annotations,
    /// Adding or removing the host's finalizer.
    Finalizer,
}

impl WriteKind {
    fn as_str(self) -> &'static str {
        match self {
            WriteKind::Apply => "apply",
            WriteKind::Prune => "prune",
            WriteKind::Status => "status",
            WriteKind::Annotations => "annotations",
            WriteKind::Finalizer => "finalizer",
        }
    }
}

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~65 s: plugin calls are sub-millisecond to a deadline of seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Registers `family` under `name` (counters get their `_total` suffix from
/// the encoder) and returns it: the registry keeps a clone that shares its
/// values.
fn registered<M: Metric + Clone>(registry: &mut Registrar, name: &str, help: &str, family: M) -> M {
    registry.families.push(FamilyDescriptor {
        name: name.to_string(),
        help: help.to_string(),
        kind: family.metric_type().as_str().to_string(),
    });
    registry.registry.register(name, help, family.clone());
    family
}

/// A registry and what was registered in it: prometheus-client leaves a
/// family out of its output until its first sample, and [`Metrics::encode`]
/// lists such families too.
#[derive(Default)]
struct Registrar {
    registry: Registry,
    families: Vec<FamilyDescriptor>,
}

/// A registered family's name (without `_total`), help and type.
#[derive(Debug, Clone)]
struct FamilyDescriptor {
    name: String,
    help: String,
    kind: String,
}

/// The controller-runtime's families: reconciles and their queue, per controller.
#[derive(Clone)]
struct ControllerFamilies {
    reconcile_total: Family<ControllerResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    workqueue_depth: Family<QueueLabels, Gauge>,
    workqueue_adds: Family<QueueLabels, Counter>,
}

impl ControllerFamilies {
    fn register(registry: &mut Registrar) -> Self {
        ControllerFamilies {
            reconcile_total: registered(
                registry,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::<ControllerResultLabels, Counter>::default(),
            ),
            reconcile_errors: registered(
                registry,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::<ControllerLabels, Counter>::default(),
            ),
            reconcile_time: registered(
                registry,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(seconds_histogram),
            ),
            workqueue_depth: registered(
                registry,
                "workqueue_depth",
                "Reconciliations currently running per controller",
                Family::<QueueLabels, Gauge>::default(),
            ),
            workqueue_adds: registered(
                registry,
                "workqueue_adds",
                "Total number of reconciliations started per controller",
                Family::<QueueLabels, Counter>::default(),
            ),
        }
    }
}

/// The per plugin: its calls, the answers' limits, writes, events, logs, refusals, readiness and shadow comparisons.
#[derive(Clone)]
struct PluginFamilies {
    call_duration: Family<CallLabels, Histogram, fn() -> Histogram>,
    traps: Family<PluginLabels, Counter>,
    timeouts: Family<PluginLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    limit_breaches: Family<LimitLabels, Counter>,
    writes: Family<WriteLabels, Counter>,
    events: Family<EventLabels, Counter>,
    log_bytes: Family<NameLabels, Counter>,
    answer_refusals: Family<RefusalLabels, Counter>,
    refusals: Family<FailureLabels, Counter>,
    plugin_ready: Family<PluginNameLabels, Gauge>,
    shadow_comparisons: Family<ShadowLabels, Counter>,
    host_marks_restored: Family<MarkLabels, Counter>,
}

impl PluginFamilies {
    fn register(registry: &mut Registrar) -> Self {
        PluginFamilies {
            call_duration: registered(
                registry,
                "wasm_operator_plugin_call_duration_seconds",
                "Duration of plugin calls",
                Family::new_with_constructor(seconds_histogram),
            ),
            traps: registered(
                registry,
                "wasm_operator_plugin_traps",
                "Plugin calls that trapped",
                Family::<PluginLabels, Counter>::default(),
            ),
            timeouts: registered(
                registry,
                "wasm_operator_plugin_timeouts",
                "Plugin calls that ran past their deadline",
                Family::<PluginLabels, Counter>::default(),
            ),
            failures: registered(
                registry,
                "wasm_operator_plugin_failures",
                "Plugin calls that failed, by reason",
                Family::<FailureLabels, Counter>::default(),
            ),
            limit_breaches: registered(
                registry,
                "wasm_operator_limit_breaches",
                "Limits per reconcile a plugin's answer breached (refused or clamped), by limit",
                Family::<LimitLabels, Counter>::default(),
            ),
            writes: registered(
                registry,
                "wasm_operator_writes",
                "API writes made for a plugin's plans, by kind of write",
                Family::<WriteLabels, Counter>::default(),
            ),
            events: registered(
                registry,
                "wasm_operator_events",
                "Events on a plugin's primaries, recorded or dropped by the limits",
                Family::<EventLabels, Counter>::default(),
            ),
            log_bytes: registered(
                registry,
                "wasm_operator_plugin_log_bytes",
                "Log bytes a plugin emitted (log import and stdout/stderr, after truncation)",
                Family::<NameLabels, Counter>::default(),
            ),
            answer_refusals: registered(
                registry,
                "wasm_operator_refusals",
                "Plugin answers refused before any write, by reason",
                Family::<RefusalLabels, Counter>::default(),
            ),
            refusals: registered(
                registry,
                "wasm_operator_plugin_version_refusals",
                "Plugin versions the registry refused to serve, by reason (PermissionDenied, PrimaryKindConflict, RollbackRefused, ...)",
                Family::<FailureLabels, Counter>::default(),
            ),
            plugin_ready: registered(
                registry,
                "wasm_operator_plugin_ready",
                "1 when the plugin's controller runs with every cache synced, 0 otherwise",
                Family::<PluginNameLabels, Gauge>::default(),
            ),
            shadow_comparisons: registered(
                registry,
                "wasm_operator_shadow_comparisons",
                "Shadow computations of a canary candidate beside the stable version, by result (same, differ, error, skipped)",
                Family::<ShadowLabels, Counter>::default(),
            ),
            host_marks_restored: registered(
                registry,
                "wasm_operator_host_marks_restored",
                "Host marks (wasm-operator.dev/* annotations and labels, app.kubernetes.io/managed-by) a plugin's answer changed and the host put back, by the call that tried (convert, upgrade)",
                Family::<MarkLabels, Counter>::default(),
            ),
        }
    }
}

/// The leader election, fencing and shards.
#[derive(Clone)]
struct LeaseFamilies {
    leader_status: Family<LeaseLabels, Gauge>,
    leader_transitions: Family<LeaseTransitionLabels, Counter>,
    fenced_writes: Family<NameLabels, Counter>,
    forged_tokens: Family<NameLabels, Counter>,
    shard_owned: Family<ShardLabels, Gauge>,
    shard_transitions: Family<ShardTransitionLabels, Counter>,
    shard_reconciles: Family<ShardPluginLabels, Counter>,
}

impl LeaseFamilies {
    fn register(registry: &mut Registrar) -> Self {
        LeaseFamilies {
            leader_status: registered(
                registry,
                "leader_election_master_status",
                "1 while this replica holds the leader-election Lease `name`, 0 otherwise (client-go's name)",
                Family::<LeaseLabels, Gauge>::default(),
            ),
            leader_transitions: registered(
                registry,
                "wasm_operator_leader_election_transitions",
                "Changes of this replica's leadership of Lease `name`: acquired, lost, released",
                Family::<LeaseTransitionLabels, Counter>::default(),
            ),
            fenced_writes: registered(
                registry,
                "wasm_operator_fenced_writes",
                "Writes a plugin's controller dropped or refused by fencing: not the leader any more, or the object carries a newer fencing token",
                Family::<NameLabels, Counter>::default(),
            ),
            forged_tokens: registered(
                registry,
                "wasm_operator_forged_fencing_tokens",
                "Fencing tokens found on a plugin's primaries above every term their Lease has issued (forged); the leader overwrote each",
                Family::<NameLabels, Counter>::default(),
            ),
            shard_owned: registered(
                registry,
                "wasm_operator_shard_owned",
                "1 while this replica holds the Lease of shard `shard` (with --shards N > 1), 0 otherwise",
                Family::<ShardLabels, Gauge>::default(),
            ),
            shard_transitions: registered(
                registry,
                "wasm_operator_shard_transitions",
                "Changes of this replica's hold on shard `shard`: acquired, lost, released",
                Family::<ShardTransitionLabels, Counter>::default(),
            ),
            shard_reconciles: registered(
                registry,
                "wasm_operator_shard_reconciles",
                "Reconciles this replica ran for primaries of shard `shard` (with --shards N > 1)",
                Family::<ShardPluginLabels, Counter>::default(),
            ),
        }
    }
}

/// Why the conversion webhook refused a review before converting any of it
/// (the `reason` label of `wasm_operator_webhook_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookRefusal {
    /// 413: the review's `Content-Length` (or the bytes sent without one)
    /// passed `--webhook-max-review-bytes`.
    TooLarge,
    /// 503: the reviews (or bytes of reviews) in flight were at their bound.
    Busy,
    /// The review carried an object over the per-object bound; it failed
    /// unparsed.
    ObjectTooLarge,
}

impl WebhookRefusal {
    /// Every reason, to create their series at zero.
    pub const ALL: [WebhookRefusal; 3] = [
        WebhookRefusal::TooLarge,
        WebhookRefusal::Busy,
        WebhookRefusal::ObjectTooLarge,
    ];

    fn as_str(self) -> &'static str {
        match self {
            WebhookRefusal::TooLarge => "too_large",
            WebhookRefusal::Busy => "busy",
            WebhookRefusal::ObjectTooLarge => "object_too_large",
        }
    }
}

/// Every metric the host records, in one Prometheus registry. Cheap to clone:
/// clones share the same families.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    families: Arc<Vec<FamilyDescriptor>>,
    controller: ControllerFamilies,
    plugin: PluginFamilies,
    lease: LeaseFamilies,
    backup: backup::BackupFamilies,
    admission: admission::AdmissionFamilies,
    webhook_refusals: Family<ReasonLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry with every family registered (and empty).
    pub fn new() -> Metrics {
        let mut registry = Registrar::default();
        let controller = ControllerFamilies::register(&mut registry);
        let plugin = PluginFamilies::register(&mut registry);
        let lease = LeaseFamilies::register(&mut registry);
        let backup = backup::BackupFamilies::register(&mut registry);
        let admission = admission::AdmissionFamilies::register(&mut registry);
        let webhook_refusals = registered(
            &mut registry,
            "wasm_operator_webhook_refusals",
            "ConversionReviews the conversion webhook refused before converting any object, by reason (too_large: 413, busy: 503, object_too_large: an object over the per-object bound)",
            Family::<ReasonLabels, Counter>::default(),
        );
        Metrics {
            registry: Arc::new(registry.registry),
            families: Arc::new(registry.families),
            controller,
            plugin,
            lease,
            backup,
            admission,
            webhook_refusals,
        }
    }

    /// The conversion webhook refused a review for `reason`.
    pub fn webhook_refusal(&self, reason: WebhookRefusal) {
        self.webhook_refusals
            .get_or_create(&ReasonLabels {
                reason: reason.as_str().to_string(),
            })
            .inc();
    }

    /// Creates the webhook's refusal series at zero, so an alert on them
    /// sees `0` before the first refusal.
    pub fn webhook_started(&self) {
        for reason in WebhookRefusal::ALL {
            let _ = self.webhook_refusals.get_or_create(&ReasonLabels {
                reason: reason.as_str().to_string(),
            });
        }
    }

    /// Whether this replica holds the Lease of `shard`.
    pub fn shard_owned(&self, shard: usize, owned: bool) {
        self.lease
            .shard_owned
            .get_or_create(&ShardLabels {
                shard: shard.to_string(),
            })
            .set(i64::from(owned));
    }

    /// This replica's hold on `shard` changed: `transition` is `acquired`,
    /// `lost` or `released`.
    pub fn shard_transition(&self, shard: usize, transition: &str) {
        self.lease
            .shard_transitions
            .get_or_create(&ShardTransitionLabels {
                shard: shard.to_string(),
                transition: transition.to_string(),
            })
            .inc();
    }

    /// `plugin`'s controller reconciles a primary of `shard`.
    pub fn shard_reconcile(&self, plugin: &str, shard: usize) {
        self.lease
            .shard_reconciles
            .get_or_create(&ShardPluginLabels {
                plugin: plugin.to_string(),
                shard: shard.to_string(),
            })
            .inc();
    }

    /// Whether this replica holds the leader-election Lease `name`.
    pub fn leader_status(&self, name: &str, leading: bool) {
        self.lease
            .leader_status
            .get_or_create(&LeaseLabels {
                name: name.to_string(),
            })
            .set(i64::from(leading));
    }

    /// This replica's leadership of Lease `name` changed: `transition` is
    /// `acquired`, `lost` or `released`.
    pub fn leader_transition(&self, name: &str, transition: &str) {
        self.lease
            .leader_transitions
            .get_or_create(&LeaseTransitionLabels {
                name: name.to_string(),
                transition: transition.to_string(),
            })
            .inc();
    }

    /// A write of `plugin`'s controller was dropped or refused by fencing.
    pub fn fenced_write(&self, plugin: &str) {
        self.lease
            .fenced_writes
            .get_or_create(&NameLabels {
                plugin: plugin.to_string(),
            })
            .inc();
    }

    /// A primary of `plugin` carried a forged fencing token (above every
    /// term its Lease has issued).
    pub fn forged_fencing_token(&self, plugin: &str) {
        self.lease
            .forged_tokens
            .get_or_create(&NameLabels {
                plugin: plugin.to_string(),
            })
            .inc();
    }

    /// An answer of `plugin` breached `limit` (a `plan::Limit` name).
    pub fn limit_breach(&self, plugin: &str, limit: &str) {
        self.plugin
            .limit_breaches
            .get_or_create(&LimitLabels {
                plugin: plugin.to_string(),
                limit: limit.to_string(),
            })
            .inc();
    }

    /// `count` host marks a `via` call (`convert`, `upgrade`) of `plugin`
    /// changed and the host restored.
    pub fn host_marks_restored(&self, plugin: &str, via: &str, count: usize) {
        if count == 0 {
            return;
        }
        self.plugin
            .host_marks_restored
            .get_or_create(&MarkLabels {
                plugin: plugin.to_string(),
                via: via.to_string(),
            })
            .inc_by(count as u64);
    }

    /// `count` API writes of `kind` for `plugin`.
    pub fn writes(&self, plugin: &str, kind: WriteKind, count: usize) {
        if count == 0 {
            return;
        }
        self.plugin
            .writes
            .get_or_create(&WriteLabels {
                plugin: plugin.to_string(),
                write: kind.as_str().to_string(),
            })
            .inc_by(count as u64);
    }

    /// Events on `plugin`'s primaries: `recorded` written, `dropped` by the
    /// limits.
    pub fn events(&self, plugin: &str, recorded: usize, dropped: usize) {
        for (outcome, count) in [("recorded", recorded), ("dropped", dropped)] {
            if count > 0 {
                self.plugin
                    .events
                    .get_or_create(&EventLabels {
                        plugin: plugin.to_string(),
                        outcome: outcome.to_string(),
                    })
                    .inc_by(count as u64);
            }
        }
    }

    /// An answer of `plugin` refused before any write, with `reason`.
    pub fn refusal(&self, plugin: &str, reason: &str) {
        self.plugin
            .answer_refusals
            .get_or_create(&RefusalLabels {
                plugin: plugin.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Replaces the per-plugin readiness series with `plugins` (name,
    /// ready): a plugin no longer loaded loses its series.
    pub fn plugins_ready<'a>(&self, plugins: impl IntoIterator<Item = (&'a str, bool)>) {
        self.plugin.plugin_ready.clear();
        for (plugin, ready) in plugins {
            self.plugin
                .plugin_ready
                .get_or_create(&PluginNameLabels {
                    plugin: plugin.to_string(),
                })
                .set(i64::from(ready));
        }
    }

    /// The registry refused version `version` of plugin `plugin` with
    /// `reason` (a `RegistryError::reason()` string).
    pub fn version_refused(&self, plugin: &str, version: &str, reason: &str) {
        self.plugin
            .refusals
            .get_or_create(&FailureLabels {
                plugin: plugin.to_string(),
                version: version.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The registry in Prometheus text exposition format (OpenMetrics).
    ///
    /// Every registered family is listed, with its `# HELP` and `# TYPE`
    /// lines, even before its first sample (prometheus-client leaves such a
    /// family out): a scrape of a fresh host names every metric, so
    /// dashboards and alert rules can be checked against it.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        let listed: std::collections::HashSet<&str> = out
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split(' ').next())
            .collect();
        let mut empty = String::new();
        for family in self.families.iter() {
            if !listed.contains(family.name.as_str()) {
                let help = family.help.replace('\\', "\\\\").replace('\n', "\\n");
                empty.push_str(&format!(
                    "# HELP {name} {help}.\n# TYPE {name} {kind}\n",
                    name = family.name,
                    kind = family.kind
                ));
            }
        }
        match out.rfind("# EOF") {
            Some(at) => out.insert_str(at, &empty),
            None => out.push_str(&empty),
        }
        out
    }

    /// Creates the per-controller series at zero, so dashboards and alerts see
    /// `errors_total 0` instead of no series before the first failure.
    pub fn controller_started(&self, controller: &str) {
        let _ = self
            .controller
            .reconcile_errors
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            });
        let _ = self.controller.workqueue_depth.get_or_create(&QueueLabels {
            name: controller.to_string(),
        });
        let _ = self.controller.workqueue_adds.get_or_create(&QueueLabels {
            name: controller.to_string(),
        });
    }

    /// Creates the per-version trap and timeout series at zero.
    pub fn plugin_version_loaded(&self, plugin: &str, version: &str) {
        let pv = PluginLabels {
            plugin: plugin.to_string(),
            version: version.to_string(),
        };
        let _ = self.plugin.traps.get_or_create(&pv);
        let _ = self.plugin.timeouts.get_or_create(&pv);
    }

    /// A reconcile of `controller` started (queue bookkeeping).
    pub fn reconcile_started(&self, controller: &str) {
        let labels = QueueLabels {
            name: controller.to_string(),
        };
        let _ = self.controller.workqueue_adds.get_or_create(&labels).inc();
        let _ = self.controller.workqueue_depth.get_or_create(&labels).inc();
    }

    /// A reconcile of `controller` finished after `seconds` with `result`.
    pub fn reconcile_finished(&self, controller: &str, result: ReconcileResult, seconds: f64) {
        let _ = self
            .controller
            .workqueue_depth
            .get_or_create(&QueueLabels {
                name: controller.to_string(),
            })
            .dec();
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.controller
            .reconcile_time
            .get_or_create(&labels)
            .observe(seconds);
        self.controller
            .reconcile_total
            .get_or_create(&ControllerResultLabels {
                controller: controller.to_string(),
                result: result.as_str().to_string(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.controller
                .reconcile_errors
                .get_or_create(&labels)
                .inc();
        }
    }

    /// One plugin call finished after `seconds`.
    pub fn plugin_call(&self, plugin: &str, version: &str, function: &str, seconds: f64) {
        self.plugin
            .call_duration
            .get_or_create(&CallLabels {
                plugin: plugin.to_string(),
                version: version.to_string(),
                function: function.to_string(),
            })
            .observe(seconds);
    }

    /// One plugin call failed with `reason` (a `CallError::reason()` string).
    pub fn plugin_failure(&self, plugin: &str, version: &str, reason: &str) {
        let pv = PluginLabels {
            plugin: plugin.to_string(),
            version: version.to_string(),
        };
        match reason {
            "PluginTrap" => {
                self.plugin.traps.get_or_create(&pv).inc();
            }
            "PluginTimeout" => {
                self.plugin.timeouts.get_or_create(&pv).inc();
            }
            _ => {}
        }
        self.plugin
            .failures
            .get_or_create(&FailureLabels {
                plugin: pv.plugin,
                version: pv.version,
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// The engine reports every plugin call (manifest, reconcile, finalize,
/// upgrade, convert) here, so no caller has to time calls itself.
impl crate::engine::CallObserver for Metrics {
    fn observe(&self, report: &crate::engine::CallReport<'_>) {
        self.plugin_call(
            report.plugin,
            report.version,
            report.function,
            report.duration.as_secs_f64(),
        );
        if report.log_bytes > 0 {
            self.plugin
                .log_bytes
                .get_or_create(&NameLabels {
                    plugin: report.plugin.to_string(),
                })
                .inc_by(report.log_bytes as u64);
        }
        if report.log_dropped > 0 {
            tracing::warn!(
                plugin = report.plugin,
                version = report.version,
                function = report.function,
                dropped = report.log_dropped,
                "the plugin's log of one call was truncated at its limit (spec.limits.logSize)"
            );
            self.limit_breach(report.plugin, "logBytes");
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
    stable: String,
    candidate: String,
    result: String,
}

/// Result label of `wasm_operator_shadow_comparisons_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowResult {
    /// The candidate's answer equals the stable version's.
    Same,
    /// The answers differ.
    Differ,
    /// The candidate failed (trap, timeout, failure, refused answer).
    Error,
    /// Not computed: `shadowConcurrency` candidate calls already ran.
    Skipped,
}

impl ShadowResult {
    fn as_str(self) -> &'static str {
        match self {
            ShadowResult::Same => "same",
            ShadowResult::Differ => "differ",
            ShadowResult::Error => "error",
            ShadowResult::Skipped => "skipped",
        }
    }
}

impl Metrics {
    /// One shadow computation of `candidate` beside `stable` of `plugin`.
    pub fn shadow_comparison(
        &self,
        plugin: &str,
        stable: &str,
        candidate: &str,
        result: ShadowResult,
    ) {
        self.plugin
            .shadow_comparisons
            .get_or_create(&ShadowLabels {
                plugin: plugin.to_string(),
                stable: stable.to_string(),
                candidate: candidate.to_string(),
                result: result.as_str().to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_registry_lists_every_family_before_its_first_sample() {
        let m = Metrics::new();
        m.plugin_call("webapp", "1.0.0", "reconcile", 0.002);
        let text = m.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        for family in m.families.iter() {
            let kind = format!("# TYPE {} {}\n", family.name, family.kind);
            assert_eq!(text.matches(&kind).count(), 1, "{kind} in {text}");
        }
        assert!(text.contains("# TYPE wasm_operator_plugin_traps counter\n"));
        assert!(text.contains("# TYPE leader_election_master_status gauge\n"));
    }

    #[test]
    fn encodes_controller_runtime_names() {
        let m = Metrics::new();
        m.reconcile_started("webapp");
        m.reconcile_finished("webapp", ReconcileResult::Error, 0.01);
        m.plugin_call("webapp", "1.0.0", "reconcile", 0.002);
        m.plugin_failure("webapp", "1.0.0", "PluginTrap");
        m.limit_breach("webapp", "children");
        m.writes("webapp", WriteKind::Apply, 3);
        m.events("webapp", 2, 5);
        m.refusal("webapp", "ChildConflict");
        m.shadow_comparison("webapp", "1.0.0", "1.2.0", ShadowResult::Differ);
        m.webhook_started();
        m.webhook_refusal(WebhookRefusal::TooLarge);
        m.webhook_refusal(WebhookRefusal::TooLarge);
        let text = m.encode();
        for needle in [
            "controller_runtime_reconcile_total{controller=\"webapp\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"webapp\"} 1",
            "controller_runtime_reconcile_time_seconds_bucket",
            "workqueue_adds_total{name=\"webapp\"} 1",
            "workqueue_depth{name=\"webapp\"} 0",
            "wasm_operator_plugin_call_duration_seconds_count{plugin=\"webapp\",version=\"1.0.0\",function=\"reconcile\"} 1",
            "wasm_operator_plugin_traps_total{plugin=\"webapp\",version=\"1.0.0\"} 1",
            "wasm_operator_plugin_failures_total{plugin=\"webapp\",version=\"1.0.0\",reason=\"PluginTrap\"} 1",
            "wasm_operator_limit_breaches_total{plugin=\"webapp\",limit=\"children\"} 1",
            "wasm_operator_writes_total{plugin=\"webapp\",write=\"apply\"} 3",
            "wasm_operator_events_total{plugin=\"webapp\",outcome=\"dropped\"} 5",
            "wasm_operator_refusals_total{plugin=\"webapp\",reason=\"ChildConflict\"} 1",
            "wasm_operator_shadow_comparisons_total{plugin=\"webapp\",stable=\"1.0.0\",candidate=\"1.2.0\",result=\"differ\"} 1",
            "wasm_operator_webhook_refusals_total{reason=\"too_large\"} 2",
            "wasm_operator_webhook_refusals_total{reason=\"busy\"} 0",
            "wasm_operator_webhook_refusals_total{reason=\"object_too_large\"} 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
