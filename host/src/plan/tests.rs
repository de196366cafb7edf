//! Plans for whole reconciles, from the observed state and a plugin answer;
//! no cluster involved.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use serde_json::{Value, json};

use super::names::PLUGIN_LABEL;
use super::test_support::{manifest, primary};
use super::*;
use crate::contract::Event;

/// The restricted default grant, for contexts that borrow it.
fn default_grant() -> &'static Grant {
    static GRANT: std::sync::LazyLock<Grant> = std::sync::LazyLock::new(Grant::default);
    &GRANT
}

fn ctx(manifest: &Manifest) -> PlanContext<'_> {
    PlanContext {
        manifest,
        grant: default_grant(),
        now: Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).single().unwrap(),
        limits: ReconcileLimits::default(),
        fencing_token: None,
        forged_fencing_token: None,
        creations_allowed: usize::MAX,
    }
}

/// Fresh per-object rates, as the controller starts them.
fn rates() -> ObjectRates {
    ObjectRates::new(
        &ReconcileLimits::default(),
        Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).single().unwrap(),
    )
}

/// No object at any desired key.
static NOTHING: std::sync::LazyLock<BTreeMap<ChildKey, Arc<CachedObject>>> =
    std::sync::LazyLock::new(BTreeMap::new);

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}})
}

fn key(kind: &str, name: &str) -> ChildKey {
    ChildKey {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: Some("prod".into()),
        name: name.into(),
    }
}

/// What the cache shows for a child the host applied for `primary()`.
fn observed_child(plural: &str, kind: &str, name: &str) -> OwnedChild {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "namespace": "prod",
                     "labels": {PLUGIN_LABEL: "webapp"},
                     "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                                          "name": "shop", "uid": "u-1", "controller": true}]},
    }))
    .unwrap();
    OwnedChild {
        resource: ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        },
        object: Arc::new(CachedObject::from_dynamic(&object)),
    }
}

fn mark_deleting(obj: &mut impl kube::Resource) {
    obj.meta_mut().deletion_timestamp =
        serde_json::from_value(json!("2025-01-02T00:00:00Z")).unwrap();
}

/// The primary as it looks after the executor carried out `plan`'s writes on it.
fn settle(mut obj: DynamicObject, plan: &Plan) -> DynamicObject {
    if let Some(patch) = &plan.status {
        let status = obj
            .data
            .as_object_mut()
            .unwrap()
            .entry("status")
            .or_insert(json!({}));
        json_patch::merge(status, patch);
    }
    let annotations = obj
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in &plan.annotations {
        match v {
            Some(v) => annotations.insert(k.clone(), v.clone()),
            None => annotations.remove(k),
        };
    }
    let finalizers = obj.metadata.finalizers.get_or_insert_with(Vec::new);
    match plan.finalizer {
        FinalizerChange::Add => finalizers.push(FINALIZER.into()),
        FinalizerChange::Remove => finalizers.retain(|f| f != FINALIZER),
        FinalizerChange::Unchanged => {}
    }
    obj
}

/// [`reconcile`] of `primary` with its observed `children`.
fn plan_of(
    primary: &DynamicObject,
    children: &[OwnedChild],
    answer: &Desired,
    ctx: &PlanContext<'_>,
) -> Result<Plan, PlanError> {
    let observed = Observed {
        primary,
        children,
        existing: &NOTHING,
    };
    reconcile(&observed, answer, ctx, &mut rates())
}

fn desired(children: Vec<Value>) -> Desired {
    Desired {
        children,
        status: Some(json!({"phase": "Running"})),
        ..Default::default()
    }
}

#[test]
fn create_applies_children_adds_the_finalizer_and_marks_the_version() {
    let m = manifest();
    let obj = primary();
    let observed = Observed {
        primary: &obj,
        children: &[],
        existing: &NOTHING,
    };
    let answer = Desired {
        events: vec![Event {
            warning: false,
            reason: "Created".into(),
            message: "m".into(),
        }],
        requeue_after_ms: Some(1500),
        ..desired(vec![service("shop"), service("shop-admin")])
    };
    let plan = reconcile(&observed, &answer, &ctx(&m), &mut rates()).unwrap();

    assert_eq!(
        plan.apply.keys().cloned().collect::<Vec<_>>(),
        vec![key("Service", "shop"), key("Service", "shop-admin")]
    );
    assert_eq!(
        plan.apply[&key("Service", "shop")].document["metadata"]["ownerReferences"][0]["uid"],
        "u-1"
    );
    assert!(plan.prune.is_empty());
    assert_eq!(plan.finalizer, FinalizerChange::Add);
    assert_eq!(
        plan.annotations[MANAGED_BY_VERSION_ANNOTATION].as_deref(),
        Some("1.2.0")
    );
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["reason"], "ReconcileSucceeded");
    assert_eq!(
        status["conditions"][0]["lastTransitionTime"],
        "2025-01-02T03:04:05Z"
    );
    assert_eq!(status["conditions"][1]["type"], "Degraded");
    assert_eq!(status["conditions"][1]["status"], "False");
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].action, EventAction::Reconcile);
    assert_eq!(plan.requeue, Requeue::AfterMs(1500));
    // One metadata write, before the children: the finalizer and the marks.
    let metadata = plan.metadata_writes();
    assert_eq!(
        metadata.first,
        Some(MetadataWrite {
            finalizer: FinalizerChange::Add,
            annotations: plan.annotations.clone(),
        })
    );
    assert_eq!(metadata.last, None);
}

/// Object writes of a plan (events apart), one per request, as the executor
/// sends them when every write changes something.
fn object_writes(plan: &Plan) -> usize {
    let metadata = plan.metadata_writes();
    let last = metadata.last.as_ref().map_or(0, |last| {
        usize::from(!last.annotations.is_empty())
            + usize::from(last.finalizer != FinalizerChange::Unchanged)
    });
    plan.apply.len()
        + plan.prune.len()
        + usize::from(plan.status.is_some())
        + usize::from(metadata.first.is_some())
        + last
}

#[test]
fn a_fresh_object_costs_one_write_per_child_plus_two() {
    let m = manifest();
    let obj = primary();
    let answer = desired(vec![service("shop"), service("shop-admin")]);
    let plan = plan_of(&obj, &[], &answer, &ctx(&m)).unwrap();
    // Metadata (finalizer and marks), two children, status.
    assert_eq!(object_writes(&plan), 4);
    // Without a finalizer the marks are written last, after the status.
    let no_finalizer = Manifest {
        finalizer: false,
        ..manifest()
    };
    let plan = plan_of(&obj, &[], &answer, &ctx(&no_finalizer)).unwrap();
    let metadata = plan.metadata_writes();
    assert_eq!(metadata.first, None);
    assert_eq!(metadata.last.unwrap().annotations, plan.annotations);
    assert_eq!(object_writes(&plan), 4);
}

#[test]
fn a_new_version_marks_last_and_a_missing_finalizer_goes_first_alone() {
    let m = manifest();
    let answer = desired(vec![]);
    let created = plan_of(&primary(), &[], &answer, &ctx(&m)).unwrap();
    let settled = settle(primary(), &created);
    // Served by a newer version: only the marks change, written last.
    let newer = Manifest {
        version: "1.3.0".into(),
        ..manifest()
    };
    let upgraded = plan_of(&settled, &[], &answer, &ctx(&newer)).unwrap();
    let metadata = upgraded.metadata_writes();
    assert_eq!(metadata.first, None);
    let last = metadata.last.unwrap();
    assert_eq!(last.finalizer, FinalizerChange::Unchanged);
    assert_eq!(
        last.annotations[MANAGED_BY_VERSION_ANNOTATION].as_deref(),
        Some("1.3.0")
    );
    // Marked, but the finalizer was removed by hand: it goes back alone,
    // first.
    let mut unheld = settled.clone();
    unheld.metadata.finalizers = Some(Vec::new());
    let plan = plan_of(&unheld, &[], &answer, &ctx(&m)).unwrap();
    let metadata = plan.metadata_writes();
    assert_eq!(
        metadata.first,
        Some(MetadataWrite {
            finalizer: FinalizerChange::Add,
            annotations: AnnotationChanges::new(),
        })
    );
    assert_eq!(metadata.last, None);
}

#[test]
fn nothing_changed_plans_no_write() {
    let m = manifest();
    let first = primary();
    let answer = desired(vec![]);
    let observed = Observed {
        primary: &first,
        children: &[],
        existing: &NOTHING,
    };
    let created = reconcile(&observed, &answer, &ctx(&m), &mut rates()).unwrap();
    let settled = settle(first.clone(), &created);

    let again = plan_of(&settled, &[], &answer, &ctx(&m)).unwrap();
    assert!(again.is_noop(), "{again:#?}");
    assert_eq!(again.metadata_writes(), MetadataWrites::default());
    assert_eq!(again.requeue, Requeue::Resync);
}

#[test]
fn unchanged_children_are_applied_again_and_nothing_else() {
    let m = manifest();
    let answer = desired(vec![service("shop")]);
    let first = primary();
    let created = plan_of(&first, &[], &answer, &ctx(&m)).unwrap();
    let settled = settle(first.clone(), &created);
    let children = [observed_child("services", "Service", "shop")];
    let again = plan_of(&settled, &children, &answer, &ctx(&m)).unwrap();
    // Server-side apply is idempotent and takes back drifted fields: sent
    // every time. Everything else is skipped.
    assert_eq!(again.apply.len(), 1);
    let rest = Plan {
        apply: Default::default(),
        ..again.clone()
    };
    assert!(rest.is_noop(), "{again:#?}");
}

#[test]
fn update_writes_the_new_generation_and_keeps_the_marks() {
    let m = manifest();
    let first = primary();
    let answer = desired(vec![service("shop")]);
    let created = plan_of(&first, &[], &answer, &ctx(&m)).unwrap();
    let mut edited = settle(first.clone(), &created);
    edited.metadata.generation = Some(2);
    let children = [observed_child("services", "Service", "shop")];
    let later = PlanContext {
        now: Utc.with_ymd_and_hms(2025, 1, 3, 0, 0, 0).single().unwrap(),
        ..ctx(&m)
    };
    let updated = plan_of(&edited, &children, &answer, &later).unwrap();
    let status = updated.status.as_ref().unwrap();
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["conditions"][0]["observedGeneration"], 2);
    // Ready stayed True: its transition time is the first one.
    assert_eq!(
        status["conditions"][0]["lastTransitionTime"],
        "2025-01-02T03:04:05Z"
    );
    assert!(updated.annotations.is_empty());
    assert_eq!(updated.finalizer, FinalizerChange::Unchanged);
    assert!(updated.prune.is_empty() && updated.events.is_empty());
}

#[test]
fn prunes_undesired_children_with_an_event_each() {
    let m = manifest();
    let obj = primary();
    let mut deleting = observed_child("configmaps", "ConfigMap", "being-deleted");
    mark_deleting(Arc::make_mut(&mut deleting.object));
    let children = [
        observed_child("services", "Service", "shop"),
        observed_child("configmaps", "ConfigMap", "old-config"),
        deleting,
    ];
    let plan = plan_of(&obj, &children, &desired(vec![service("shop")]), &ctx(&m)).unwrap();
    let pruned = key("ConfigMap", "old-config");
    assert_eq!(plan.prune.keys().collect::<Vec<_>>(), vec![&pruned]);
    assert_eq!(plan.prune[&pruned].resource.plural, "configmaps");
    assert_eq!(
        plan.events,
        vec![PlannedEvent {
            warning: false,
            reason: "ChildPruned".into(),
            message: "deleted ConfigMap prod/old-config: no longer desired by plugin webapp".into(),
            action: EventAction::Prune,
            only_if_pruned: Some(pruned),
        }]
    );
}

#[test]
fn capability_refusal_plans_nothing() {
    let m = manifest();
    let obj = primary();
    let children = [observed_child("services", "Service", "shop")];
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}});
    let err = plan_of(
        &obj,
        &children,
        &desired(vec![service("shop"), secret]),
        &ctx(&m),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "CapabilityDenied");
    assert_eq!(
        err.to_string(),
        "plugin webapp 1.2.0 returned children of kinds it does not own: v1 Secret; nothing was written. Add the kinds to the manifest's `owns` or stop returning them"
    );
}

#[test]
fn plugin_conditions_replace_the_defaults() {
    let m = manifest();
    let obj = primary();
    let answer = Desired {
        conditions: vec![condition("Ready", "False", "Waiting", "pods starting")],
        ..desired(vec![])
    };
    let plan = plan_of(&obj, &[], &answer, &ctx(&m)).unwrap();
    let kinds: Vec<_> = plan
        .conditions
        .iter()
        .map(|c| (c.kind.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(kinds, vec![("Ready", "False"), ("Degraded", "False")]);
}

fn deleting(finalizers: &[&str]) -> DynamicObject {
    let mut obj = super::test_support::with_finalizers(primary(), finalizers);
    mark_deleting(&mut obj);
    obj
}

#[test]
fn finalize_removes_the_finalizer_when_done() {
    let m = manifest();
    let obj = deleting(&[FINALIZER]);
    let plan = finalize(&obj, Some(Finalized::Done), &ctx(&m));
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].reason, "Finalized");
    assert_eq!(
        plan.events[0].message,
        "plugin webapp 1.2.0 finalized the object"
    );
    assert_eq!(plan.requeue, Requeue::AwaitChange);
    assert!(plan.apply.is_empty() && plan.status.is_none() && plan.annotations.is_empty());
    // A version without a finalizer of its own releases without a call.
    assert_eq!(
        finalize(&obj, None, &ctx(&m)).finalizer,
        FinalizerChange::Remove
    );
    // Removed last, alone.
    let metadata = plan.metadata_writes();
    assert_eq!(metadata.first, None);
    assert_eq!(
        metadata.last,
        Some(MetadataWrite {
            finalizer: FinalizerChange::Remove,
            annotations: AnnotationChanges::new(),
        })
    );
    // Released: the object settles without it.
    assert!(settle(obj, &plan).metadata.finalizers.unwrap().is_empty());
}

#[test]
fn finalize_waits_or_leaves_foreign_objects_alone() {
    let m = manifest();
    let waiting = finalize(
        &deleting(&[FINALIZER]),
        Some(Finalized::Wait(2000)),
        &ctx(&m),
    );
    assert!(waiting.is_noop());
    assert_eq!(waiting.requeue, Requeue::AfterMs(2000));
    let foreign = finalize(
        &deleting(&["other/finalizer"]),
        Some(Finalized::Done),
        &ctx(&m),
    );
    assert!(foreign.is_noop());
    assert_eq!(foreign.requeue, Requeue::AwaitChange);
}

#[test]
fn failure_reports_degraded_and_a_warning() {
    let report = FailureReport {
        reason: "PluginTrap".into(),
        message: "plugin webapp 1.2.0 trapped".into(),
    };
    let now = Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).single().unwrap();
    let plan = failure(&primary(), &report, now);
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status["conditions"][0]["type"], "Degraded");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["conditions"][0]["reason"], "PluginTrap");
    assert_eq!(status["conditions"][1]["type"], "Ready");
    assert_eq!(status["conditions"][1]["status"], "False");
    assert_eq!(
        status["conditions"][1]["message"],
        "plugin webapp 1.2.0 trapped"
    );
    assert_eq!(
        plan.events,
        vec![PlannedEvent {
            warning: true,
            reason: "PluginTrap".into(),
            message: "plugin webapp 1.2.0 trapped".into(),
            action: EventAction::Reconcile,
            only_if_pruned: None,
        }]
    );
    assert_eq!(plan.finalizer, FinalizerChange::Unchanged);
    assert!(plan.annotations.is_empty() && plan.apply.is_empty());
    assert_eq!(plan.requeue, Requeue::Backoff);

    // Reported already: only the event is recorded again.
    let settled = settle(primary(), &plan);
    let again = failure(&settled, &report, now);
    assert_eq!(again.status, None);
    assert_eq!(again.events.len(), 1);
}

#[test]
fn equal_inputs_make_equal_plans() {
    let m = manifest();
    let obj = primary();
    let observed = Observed {
        primary: &obj,
        children: &[],
        existing: &NOTHING,
    };
    // Children come back in any order; plans compare by identity.
    let a = reconcile(
        &observed,
        &desired(vec![service("a"), service("b")]),
        &ctx(&m),
        &mut rates(),
    )
    .unwrap();
    let b = reconcile(
        &observed,
        &desired(vec![service("b"), service("a")]),
        &ctx(&m),
        &mut rates(),
    )
    .unwrap();
    assert_eq!(a, b);
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// An object at `prod/<name>` of kind ConfigMap with `owner` as its
/// controller (uid), or none.
fn existing(name: &str, owner: Option<&str>) -> (ChildKey, Arc<CachedObject>) {
    let refs = owner.map_or_else(
        || json!([]),
        |uid| json!([{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "other", "uid": uid, "controller": true}]),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "prod", "ownerReferences": refs},
    }))
    .unwrap();
    (
        key("ConfigMap", name),
        Arc::new(CachedObject::from_dynamic(&object)),
    )
}

#[test]
fn a_child_that_exists_and_is_not_ours_is_a_conflict_and_nothing_is_planned() {
    let m = manifest();
    let obj = primary();
    for (owner, expected) in [
        (None, "no controlling owner"),
        (Some("u-other"), "controlled by WebApp other (uid u-other)"),
    ] {
        let found: BTreeMap<_, _> = [existing("users-config", owner)].into_iter().collect();
        let observed = Observed {
            primary: &obj,
            children: &[],
            existing: &found,
        };
        let answer = desired(vec![configmap("users-config"), configmap("mine")]);
        let err = reconcile(&observed, &answer, &ctx(&m), &mut rates()).unwrap_err();
        assert_eq!(err.reason(), "ChildConflict");
        let text = err.to_string();
        assert!(
            text.contains("ConfigMap prod/users-config") && text.contains(expected),
            "{text}"
        );
        assert!(!text.contains("prod/mine"), "{text}");
    }
    // Ours (controlled by this primary's uid): applied as usual.
    let found: BTreeMap<_, _> = [existing("mine", Some("u-1"))].into_iter().collect();
    let observed = Observed {
        primary: &obj,
        children: &[],
        existing: &found,
    };
    let plan = reconcile(
        &observed,
        &desired(vec![configmap("mine")]),
        &ctx(&m),
        &mut rates(),
    )
    .unwrap();
    assert_eq!(plan.apply.len(), 1);
}

#[test]
fn the_host_controls_childrens_metadata() {
    let m = manifest();
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "sticky",
        "finalizers": ["hostile.example.com/never"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "kube-system", "uid": "fake", "controller": true}],
        "labels": {"app": "x", PLUGIN_LABEL: "someone-else", "app.kubernetes.io/managed-by": "me"},
        "annotations": {"note": "kept", "wasm-operator.dev/managed-by-version": "9.9.9"},
        "deletionTimestamp": "2025-01-01T00:00:00Z",
    }});
    let plan = plan_of(&primary(), &[], &desired(vec![child]), &ctx(&m)).unwrap();
    let meta = &plan.apply[&key("ConfigMap", "sticky")].document["metadata"];
    assert!(
        meta.get("finalizers").is_none() && meta.get("deletionTimestamp").is_none(),
        "{meta}"
    );
    assert_eq!(meta["ownerReferences"].as_array().unwrap().len(), 1);
    assert_eq!(meta["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(
        meta["labels"],
        json!({"app": "x", PLUGIN_LABEL: "webapp", "app.kubernetes.io/managed-by": "wasm-operator"})
    );
    assert_eq!(meta["annotations"], json!({"note": "kept"}));
}

#[test]
fn children_the_api_server_would_refuse_are_refused_before_any_write() {
    let m = manifest();
    for (child, rule) in [
        (configmap("Not_A_DNS_Name"), "DNS-1123 subdomain"),
        (service("web.v1"), "DNS-1035 label"),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"k": "not valid!"}}}),
            "label \"k\"",
        ),
    ] {
        let err = plan_of(
            &primary(),
            &[],
            &desired(vec![configmap("fine"), child]),
            &ctx(&m),
        )
        .unwrap_err();
        assert_eq!(err.reason(), "PluginInvalidOutput");
        assert!(err.to_string().contains(rule), "{err}");
    }
}

#[test]
fn refusing_limits_plan_nothing() {
    let m = manifest();
    let limits = ReconcileLimits {
        max_children: 2,
        max_status_bytes: 1024,
        ..ReconcileLimits::default()
    };
    let c = PlanContext { limits, ..ctx(&m) };
    let many = desired(vec![configmap("a"), configmap("b"), configmap("c")]);
    let err = plan_of(&primary(), &[], &many, &c).unwrap_err();
    assert_eq!(
        (err.reason(), err.limit()),
        ("TooManyChildren", Some(Limit::Children))
    );
    assert!(
        err.to_string()
            .contains("3 children, more than its limit of 2"),
        "{err}"
    );
    let huge = Desired {
        status: Some(json!({"blob": "x".repeat(2048)})),
        ..Desired::default()
    };
    let err = plan_of(&primary(), &[], &huge, &c).unwrap_err();
    assert_eq!(
        (err.reason(), err.limit()),
        ("StatusTooLarge", Some(Limit::StatusSize))
    );
}

#[test]
fn clamps_write_and_say_so_in_degraded() {
    let m = manifest();
    let answer = Desired {
        conditions: vec![
            Condition {
                kind: "Available".into(),
                status: "True".into(),
                reason: "Long".into(),
                message: "y".repeat(40 << 10),
            },
            Condition {
                kind: "Degraded".into(),
                status: "False".into(),
                reason: "AllGood".into(),
                message: "the plugin says all is well".into(),
            },
        ],
        events: (0..30)
            .map(|i| Event {
                warning: false,
                reason: format!("E{i}"),
                message: "m".into(),
            })
            .collect(),
        requeue_after_ms: Some(0),
        ..desired(vec![])
    };
    let plan = plan_of(&primary(), &[], &answer, &ctx(&m)).unwrap();
    let limits: Vec<Limit> = plan.breaches.iter().map(|b| b.limit).collect();
    assert_eq!(
        limits,
        [
            Limit::EventsPerReconcile,
            Limit::ConditionMessage,
            Limit::RequeueAfter
        ]
    );
    assert_eq!(plan.events.len(), 20);
    assert_eq!(plan.requeue, Requeue::AfterMs(1000));
    let available = plan
        .conditions
        .iter()
        .find(|c| c.kind == "Available")
        .unwrap();
    assert!(available.message.len() <= (32 << 10) + '…'.len_utf8());
    let degraded: Vec<_> = plan
        .conditions
        .iter()
        .filter(|c| c.kind == "Degraded")
        .collect();
    assert_eq!(degraded.len(), 1, "the plugin's Degraded is replaced");
    assert_eq!(
        (degraded[0].status.as_str(), degraded[0].reason.as_str()),
        ("True", "LimitExceeded")
    );
    for name in ["eventsPerReconcile", "conditionMessage", "requeueAfter"] {
        assert!(
            degraded[0].message.contains(name),
            "{}",
            degraded[0].message
        );
    }
    // Ready stays the host's default: the write happened.
    assert!(
        plan.conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True")
    );
}

#[test]
fn a_hot_loop_is_reported_by_the_next_reconcile_that_runs() {
    let m = manifest();
    let c = ctx(&m);
    let limits = ReconcileLimits {
        reconcile_burst: 1,
        ..ReconcileLimits::default()
    };
    let mut r = ObjectRates::new(&limits, c.now);
    assert_eq!(r.admit_reconcile(&limits, c.now, None), Admission::Run);
    assert!(matches!(
        r.admit_reconcile(&limits, c.now, None),
        Admission::Delay { first: true, .. }
    ));
    let obj = primary();
    let observed = Observed {
        primary: &obj,
        children: &[],
        existing: &NOTHING,
    };
    let plan = reconcile(&observed, &desired(vec![]), &c, &mut r).unwrap();
    assert_eq!(plan.breaches[0].limit, Limit::ReconcileRate);
    assert!(plan.breaches[0].detail.contains("hot loop"));
    // Looked at again once a token is back, so a loop that stopped clears.
    assert_eq!(plan.requeue, Requeue::AfterMs(2000));
    let again = reconcile(&observed, &desired(vec![]), &c, &mut r).unwrap();
    assert!(again.breaches.is_empty());
}

#[test]
fn a_refused_answer_takes_no_event_tokens() {
    let m = manifest();
    let limits = ReconcileLimits {
        max_status_bytes: 1024,
        event_burst: 1,
        ..ReconcileLimits::default()
    };
    let c = PlanContext { limits, ..ctx(&m) };
    let mut r = ObjectRates::new(&limits, c.now);
    let obj = primary();
    let observed = Observed {
        primary: &obj,
        children: &[],
        existing: &NOTHING,
    };
    let event = Event {
        warning: false,
        reason: "E".into(),
        message: "m".into(),
    };
    let refused = Desired {
        status: Some(json!({"blob": "x".repeat(2048)})),
        events: vec![event.clone()],
        ..Desired::default()
    };
    assert!(reconcile(&observed, &refused, &c, &mut r).is_err());
    let fine = Desired {
        events: vec![event],
        ..desired(vec![])
    };
    let plan = reconcile(&observed, &fine, &c, &mut r).unwrap();
    assert_eq!(plan.events.len(), 1, "{:?}", plan.breaches);
}

#[test]
fn only_children_the_caches_show_as_ours_are_force_applied() {
    let m = manifest();
    let children = [observed_child("services", "Service", "shop")];
    let plan = plan_of(
        &primary(),
        &children,
        &desired(vec![service("shop"), service("fresh")]),
        &ctx(&m),
    )
    .unwrap();
    assert!(plan.apply[&key("Service", "shop")].exists);
    // Not cached: created without force, so an object someone created
    // meanwhile is refused by the API server instead of taken over.
    assert!(!plan.apply[&key("Service", "fresh")].exists);
}

#[test]
fn json_size_counts_the_compact_text() {
    let value = json!({"phase": "Running", "conditions": [{"type": "Ready", "message": "é"}]});
    assert_eq!(
        super::json_size(&value),
        serde_json::to_vec(&value).unwrap().len()
    );
}

/// `webapp` owning Deployments and Pods too.
fn workload_manifest() -> Manifest {
    let mut m = manifest();
    for (group, kind, plural) in [("apps", "Deployment", "deployments"), ("", "Pod", "pods")] {
        m.owns.push(crate::contract::ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: crate::contract::Scope::Namespaced,
        });
    }
    m
}

/// A Deployment whose pods meet `restricted`, with `pod` merged into its
/// pod spec.
fn deployment(name: &str, pod: Value) -> Value {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": "nginx", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), pod.as_object()) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}}, "spec": spec}},
    })
}

#[test]
fn a_workload_beyond_the_grant_refuses_the_whole_answer() {
    let m = workload_manifest();
    let answer = desired(vec![
        configmap("fine"),
        deployment("web", json!({})),
        deployment(
            "escape",
            json!({"serviceAccountName": "wasm-operator", "hostPID": true}),
        ),
    ]);
    let err = plan_of(&primary(), &[], &answer, &ctx(&m)).unwrap_err();
    assert_eq!(err.reason(), "CapabilityDenied");
    let text = err.to_string();
    for part in [
        "plugin webapp 1.2.0",
        "Deployment prod/escape: `spec.template.spec.hostPID` is true",
        "workloads.podSecurity: privileged",
        "Deployment prod/escape: `spec.template.spec.serviceAccountName` is \"wasm-operator\"",
        "workloads.serviceAccounts",
        "nothing was written",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(!text.contains("prod/web:"), "{text}");
    // The same answer under a grant that allows it is planned.
    let grant = Grant {
        workloads: Some(crate::contract::WorkloadGrant {
            pod_security: crate::contract::PodSecurityLevel::Privileged,
            service_accounts: vec!["wasm-operator".into()],
        }),
        ..Grant::default()
    };
    let allowed = PlanContext {
        grant: &grant,
        ..ctx(&m)
    };
    let plan = plan_of(&primary(), &[], &answer, &allowed).unwrap();
    assert_eq!(plan.apply.len(), 3);
}

#[test]
fn a_workload_without_a_pod_spec_is_invalid_output() {
    let m = workload_manifest();
    let answer = desired(vec![json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": ["not", "a", "spec"],
    })]);
    let err = plan_of(&primary(), &[], &answer, &ctx(&m)).unwrap_err();
    assert_eq!(err.reason(), "PluginInvalidOutput");
    assert!(
        err.to_string()
            .contains("Pod prod/p: `spec` is not an object"),
        "{err}"
    );
}
