//! Every reason the host writes into a condition, an event or an audit
//! line, in one enum, so an on-call engineer can search for them and the
//! documentation's tables can be checked against the code
//! (`host/tests/reasons.rs`).

use std::fmt;

/// Where a reason appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonScope {
    /// On a primary object (`Degraded`/`Ready` conditions and Warning
    /// events) when one reconcile fails: the "What happens when a plugin
    /// misbehaves" table of docs/operations.md.
    Reconcile,
    /// On a primary when the version walk stops a reconcile
    /// (docs/deploying-plugins.md, "Version-aware upgrades").
    Upgrade,
    /// On a `WasmPlugin` (its `Degraded` condition and Warning events) when a
    /// version cannot be loaded or served.
    WasmPlugin,
    /// A success or a transition: `Ready=True`, Normal events, audit lines.
    Normal,
    /// Backups and restores: a Backup's or Restore's `status.reason`, the
    /// conditions of a primary's `status.backup`, and the events on them
    /// (the reason table of docs/backup.md).
    Backup,
    /// Admission of a plugin's own objects: Warning events on stored
    /// primaries its serving version's `validate` refuses (the reason table
    /// of docs/admission.md).
    Admission,
}

macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident => $scope:ident,)*) => {
        /// A searchable CamelCase reason.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The reason as written into conditions and events.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => stringify!($variant),)*
                }
            }

            /// Where the reason appears.
            pub fn scope(self) -> ReasonScope {
                match self {
                    $(Reason::$variant => ReasonScope::$scope,)*
                }
            }
        }
    };
}

reasons! {
    /// The plugin panicked or executed `unreachable`.
    PluginTrap => Reconcile,
    /// The call ran past its deadline (epoch interruption).
    PluginTimeout => Reconcile,
    /// The call's linear memory hit its limit.
    PluginMemoryExceeded => Reconcile,
    /// The answer exceeded the output cap.
    PluginOutputTooLarge => Reconcile,
    /// The answer breaks the contract (a child without a name, a bad
    /// condition status, a child in another namespace, …).
    PluginInvalidOutput => Reconcile,
    /// The plugin read or wrote a kind its manifest does not declare.
    CapabilityDenied => Reconcile,
    /// The plugin answered a transient failure (retried with backoff).
    ReconcileFailed => Reconcile,
    /// The plugin answered a permanent failure (waits for a change).
    ReconcilePermanentFailure => Reconcile,
    /// The API server refused a write (retried with backoff).
    ApplyFailed => Reconcile,
    /// The API server refused a write in a way retrying cannot fix (400,
    /// 403, 422, ...): waits for the object to change.
    ApplyRejected => Reconcile,
    /// A desired child already exists and is not controlled by this
    /// primary: nothing is written.
    ChildConflict => Reconcile,
    /// The answer desires more children than the plugin's limit: nothing
    /// is written.
    TooManyChildren => Reconcile,
    /// The status patch is larger than the plugin's limit: nothing is
    /// written.
    StatusTooLarge => Reconcile,
    /// The answer was clamped (a message truncated, events dropped, a
    /// requeue delayed, a rate limited); the write proceeded.
    LimitExceeded => Reconcile,
    /// The object carried a fencing token of this replica's Lease above
    /// every term the Lease has issued (a hand edit or another writer forged
    /// it): the leader overwrote it with its own term and reported it
    /// (`Degraded=True`, a Warning event,
    /// `wasm_operator_forged_fencing_tokens_total`).
    ForgedFencingToken => Reconcile,
    /// One object was reconciled more often than its rate limit allows
    /// (a Warning event); the next reconcile is delayed.
    HotLoop => Reconcile,
    /// Every instance of the engine's pool was busy (retried with backoff).
    InstancePoolFull => Reconcile,
    /// The plugin does not implement an optional interface the host needed.
    NotImplemented => Reconcile,
    /// A host-side problem, not the plugin's.
    InternalError => Reconcile,
    /// The plugin's `upgrade` of an object an older version managed failed.
    UpgradeFailed => Upgrade,
    /// A newer version declared the serving one unable to handle the object.
    IncompatibleVersion => Upgrade,
    /// The component is not a component of the host's world, or its
    /// manifest is invalid.
    InvalidComponent => WasmPlugin,
    /// The WasmPlugin's spec is invalid.
    InvalidSpec => WasmPlugin,
    /// The file, ConfigMap key or OCI reference does not exist.
    SourceNotFound => WasmPlugin,
    /// The ConfigMap could not be read.
    SourceUnavailable => WasmPlugin,
    /// The fetched component's digest is not the pinned one.
    DigestMismatch => WasmPlugin,
    /// The OCI manifest carries no signature satisfying the verification
    /// policy (`spec.verification` or the host-wide one).
    SignatureNotVerified => WasmPlugin,
    /// The OCI registry could not be reached.
    RegistryUnreachable => WasmPlugin,
    /// The OCI registry refused the credentials.
    RegistryUnauthorized => WasmPlugin,
    /// The pull secret is missing or not a docker config.
    InvalidPullSecret => WasmPlugin,
    /// Pulling from the registry failed otherwise.
    PullFailed => WasmPlugin,
    /// A new version reconciles another primary kind.
    PrimaryKindChanged => WasmPlugin,
    /// A new version has another plugin name than the one served.
    PluginNameChanged => WasmPlugin,
    /// Another WasmPlugin already serves a plugin of that name.
    PluginNameConflict => WasmPlugin,
    /// A rollback below the serving version's min-compatible-version.
    RollbackRefused => WasmPlugin,
    /// The manifest asks for more than the plugin's grant
    /// (`WasmPlugin.spec.permissions`, `run --grant`); each excess is named.
    PermissionDenied => WasmPlugin,
    /// Another plugin already serves this primary kind.
    PrimaryKindConflict => WasmPlugin,
    /// The cluster does not serve a kind the manifest names (primary, owns
    /// or watches); retried until it is served (e.g. its CRD installed).
    KindNotServed => WasmPlugin,
    /// The API server forbids the plugin's list, watch or a write (403:
    /// RBAC lacks the verb for the resource); the `Forbidden` condition
    /// names verb, resource and identity, and clears once RBAC allows it.
    Forbidden => WasmPlugin,
    /// Primaries of the plugin's kind lie in namespaces its grant
    /// excludes: they are not reconciled (`status.outsideGrant`).
    OutsideGrant => WasmPlugin,
    /// The cluster serves a kind of the manifest under another plural or
    /// scope than the manifest declares.
    KindMismatch => WasmPlugin,
    /// API discovery could not be read to check the manifest's kinds
    /// (retried with backoff).
    DiscoveryUnavailable => WasmPlugin,
    /// A file source is not a regular file (a directory, a FIFO, a device
    /// such as `/dev/zero`).
    SourceNotAFile => WasmPlugin,
    /// Loading failed for a reason not listed above.
    LoadFailed => WasmPlugin,
    /// The engine refused a component given with `run --plugin` (a
    /// WasmPlugin names the finer `InvalidComponent`).
    InvalidPlugin => WasmPlugin,
    /// The wasm engine could not start.
    EngineUnavailable => WasmPlugin,
    /// No plugin of that name is loaded.
    NotLoaded => WasmPlugin,
    /// The reconcile succeeded.
    ReconcileSucceeded => Normal,
    /// A write was not sent because of leader election: this replica no
    /// longer leads, or the object carries a newer fencing token than this
    /// replica's term (a newer leader wrote it). Logged and counted
    /// (`wasm_operator_fenced_writes_total`), never written on the object,
    /// which belongs to the leader.
    Fenced => Normal,
    /// An owned child no longer desired was deleted.
    ChildPruned => Normal,
    /// The plugin finalized the object; the host released it.
    Finalized => Normal,
    /// The plugin's WasmPlugin was deleted while the object held the host's
    /// finalizer: nothing can run `finalize` any more, so the host removed
    /// its finalizer without it (a Warning event on the object).
    FinalizeSkipped => Normal,
    /// An object an older version managed was upgraded.
    Upgraded => Normal,
    /// A plugin version was loaded for the first time.
    Loaded => Normal,
    /// The serving version was reloaded with new settings.
    Reloaded => Normal,
    /// A newer version replaced the serving one.
    Swapped => Normal,
    /// An older version replaced the serving one.
    RolledBack => Normal,
    /// The plugin was stopped.
    Unloaded => Normal,
    /// A canary's pre-flight dry run started: the candidate computes over
    /// every existing primary, writing nothing.
    DryRunStarted => Normal,
    /// The dry run found primaries the candidate would fail on; it serves
    /// nothing (condition `CanaryFailed`, the objects in status).
    DryRunFailed => WasmPlugin,
    /// A canary's candidate started shadowing or serving its share.
    CanaryStarted => Normal,
    /// A Split canary's weight advanced one step.
    CanaryStepped => Normal,
    /// An analysis check passed (after a pause).
    AnalysisPassed => Normal,
    /// An analysis check saw fewer calls than `minCalls`: the canary pauses.
    AnalysisInconclusive => Normal,
    /// An analysis check failed; at `failureLimit` the candidate is rolled
    /// back. The message names every threshold crossed and its figures.
    AnalysisFailed => WasmPlugin,
    /// Analysis passed; promotion is manual and waits for a person.
    AwaitingPromotion => Normal,
    /// The candidate was promoted: it serves every object.
    CanaryPromoted => Normal,
    /// Promotion refused: the candidate is not signed by the identity
    /// `spec.canary.requireSigner` names; it keeps shadowing or serving its
    /// share.
    CanaryPromotionRefused => WasmPlugin,
    /// A person aborted the canary (annotation, CLI, or `spec.canary`
    /// removed): the stable version serves every object again.
    CanaryAborted => Normal,
    /// The canary's candidate could not be loaded, or can no longer serve:
    /// rolled back.
    CandidateUnloadable => WasmPlugin,
    /// A new kind of difference between the candidate's shadow answers and
    /// the stable version's (a Warning per new kind).
    ShadowDiffers => WasmPlugin,
    /// The `wasm-operator.dev/canary-action` annotation holds an unknown
    /// value (it takes `promote` or `abort`).
    CanaryActionUnknown => WasmPlugin,
    /// A split or selector canary candidate declares a
    /// `min_compatible_version` above the stable version: objects it wrote
    /// could not be rolled back, so it was refused.
    CanaryIrreversible => WasmPlugin,
    /// A canary operation (promote, abort, step) found no candidate.
    NoCanary => WasmPlugin,
    /// A version's `convert` failed the round-trip gate: a stored object
    /// did not come back identical through another served API version (and
    /// the WasmPlugin does not allow lossy conversion), or `convert` failed
    /// on it. The version does not serve; the previous one keeps serving.
    ConversionNotLossless => WasmPlugin,
    /// `permissions.crds`: the CRD the plugin carries is of another group,
    /// or of a kind of its primary's group it does not declare. The version
    /// does not serve; the previous one keeps serving.
    CrdOutsideGroup => WasmPlugin,
    /// `permissions.crds`: the CRD the plugin carries lacks a version the
    /// cluster still stores objects in (`status.storedVersions`). The
    /// version does not serve; the previous one keeps serving.
    CrdDropsStoredVersion => WasmPlugin,
    /// `permissions.crds`: the CRD the plugin carries is invalid, would
    /// change the cluster CRD's scope, or the API server refused it (its
    /// message is quoted). The version does not serve.
    CrdRejected => WasmPlugin,
    /// The plugin carries a CRD that differs from the cluster's (or the
    /// cluster has none) and `permissions.crds` is not granted: the host
    /// left the CRD alone (a Warning event, once per version).
    CrdNotApplied => WasmPlugin,
    /// `permissions.crds`: the host created or updated the plugin's CRD
    /// before the version served.
    CrdApplied => Normal,
    /// The API server dropped status fields the host wrote on a primary
    /// (its CRD's status schema prunes them): a Warning event naming the
    /// fields, once per object and set of fields.
    StatusPruned => Reconcile,
    /// A storage-version migration rewrites the objects of the plugin's CRD
    /// now (the WasmPlugin's `StorageMigration` condition).
    InProgress => Normal,
    /// A storage-version migration rewrote every object and narrowed the
    /// CRD's `storedVersions` to the storage version.
    Completed => Normal,
    /// The CRD's `storedVersions` already is the storage version alone:
    /// nothing to migrate (another replica or an earlier run finished).
    AlreadyMigrated => Normal,
    /// The API server refused to rewrite some objects during a storage
    /// migration (they are named); `storedVersions` is kept and the
    /// migration is tried again.
    ObjectsRefused => WasmPlugin,
    /// A storage migration stopped on an API error; it resumes from its
    /// saved progress.
    Interrupted => WasmPlugin,
    /// A backup Job was created for a Backup.
    BackupStarted => Backup,
    /// A Backup completed: its Job succeeded and reported the location.
    BackupCompleted => Backup,
    /// A Backup failed (the Backup's own reason says why).
    BackupFailed => Backup,
    /// The plugin's `backup.plan` failed for a primary: no backup is taken
    /// until the primary or the plugin changes.
    BackupPlanFailed => Backup,
    /// The plan's schedule or time zone is invalid (the message names the
    /// field and shows valid syntax).
    BackupScheduleInvalid => Backup,
    /// The schedule and zone parse (condition `BackupScheduleValid`).
    BackupScheduleValid => Backup,
    /// Schedule slots passed while no host acted on them (event, and the
    /// `BackupScheduleMissed` condition with the count).
    BackupScheduleMissed => Backup,
    /// Condition `BackupScheduleMissed` false: the last slot was taken on
    /// time.
    BackupOnSchedule => Backup,
    /// Several slots were missed and the last was caught up with one
    /// backup (condition `BackupScheduleMissed`).
    BackupCaughtUp => Backup,
    /// A slot fell due while a backup of the primary ran (concurrency
    /// `Forbid`): recorded, not taken.
    BackupSkipped => Backup,
    /// The plan's retention keeps no completed backup: nothing is deleted.
    BackupRetentionInvalid => Backup,
    /// A deleting primary's final backup was started.
    FinalBackupStarted => Backup,
    /// The final backup completed: the primary is released.
    FinalBackupCompleted => Backup,
    /// The final backup failed: the primary is kept and the backup retried
    /// (the message says how to skip it).
    FinalBackupFailed => Backup,
    /// A person skipped the final backup (annotation
    /// `backup.wasm-operator.dev/skip-final-backup`).
    FinalBackupSkipped => Backup,
    /// A Backup's primary does not exist.
    PrimaryNotFound => Backup,
    /// A Backup's primary was deleted and created again under its name.
    PrimaryReplaced => Backup,
    /// The plugin plans no backup for the primary.
    NoBackupPlan => Backup,
    /// `backup.plan` failed when a Backup was to start.
    PlanFailed => Backup,
    /// The plan's (or restore's) Job is refused: not a Job, in another
    /// namespace, not owned by the manifest, or against the grant's
    /// workload rules.
    PlanRefused => Backup,
    /// A Job of the Backup's or Restore's name exists and is not its own.
    JobNameTaken => Backup,
    /// The API server refused to create the Job.
    JobRefused => Backup,
    /// The Job disappeared before it finished.
    JobMissing => Backup,
    /// The Job ran past its `activeDeadlineSeconds` (a hung Job).
    DeadlineExceeded => Backup,
    /// The Job's Pods failed more often than its `backoffLimit`.
    BackoffLimitExceeded => Backup,
    /// The Job failed for another reason (its message says which).
    JobFailed => Backup,
    /// The backup Job succeeded but no Pod's termination message said
    /// where the data went (`{"location": "..."}`).
    LocationNotReported => Backup,
    /// A Restore names a Backup that does not exist.
    BackupNotFound => Backup,
    /// A Restore names a Backup that failed.
    BackupNotCompleted => Backup,
    /// The restore target is held by another Restore.
    TargetBusy => Backup,
    /// The restore hold could not be put on the target.
    HoldFailed => Backup,
    /// The target of a Restore does not exist and the Backup recorded no
    /// spec to create it from.
    NoRecordedSpec => Backup,
    /// The target of a Restore could not be created from the Backup.
    TargetNotCreated => Backup,
    /// The target of a Restore was deleted during the restore.
    TargetNotFound => Backup,
    /// The restore hold was removed before the restore Job started.
    HoldLost => Backup,
    /// The plugin's `backup.restore` failed.
    RestorePlanFailed => Backup,
    /// The hold could not be removed after the restore completed.
    ReleaseFailed => Backup,
    /// The Restore's status could not be written.
    StatusNotWritten => Backup,
    /// A Restore started: the target is held.
    RestoreStarted => Backup,
    /// A Restore completed: the target is released and reconciled.
    RestoreCompleted => Backup,
    /// A Restore failed: the target stays held (the message says how to
    /// release it).
    RestoreFailed => Backup,
    /// The audit of stored objects found that the serving version's
    /// `validate` refuses this object as it is stored (a Warning event on
    /// it, once per new verdict).
    AdmissionAuditViolation => Admission,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> String {
        reason.as_str().to_string()
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_camel_case() {
        let mut seen = std::collections::HashSet::new();
        for reason in Reason::ALL {
            let name = reason.as_str();
            assert!(seen.insert(name), "{name} twice");
            assert!(name.starts_with(|c: char| c.is_ascii_uppercase()), "{name}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric()), "{name}");
        }
    }
}
