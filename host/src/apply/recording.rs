//! A writer that sends nothing: it records every plan it is asked to write
//! and answers with scripted outcomes, so the reconcile shell's branches are
//! tested without a cluster.

use std::collections::VecDeque;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::ApplyError;
use super::execute::{Executed, WritePlan};
use crate::plan::{FinalizerChange, Plan, display_name};
use crate::util::lock;

/// One write the shell asked for: the plan and the primary it was for.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The primary, `namespace/name`.
    pub object: String,
    /// The plan to carry out.
    pub plan: Plan,
}

/// Records plans instead of writing them; see the module docs.
#[derive(Debug, Default)]
pub struct Recording {
    written: Mutex<Vec<Recorded>>,
    script: Mutex<VecDeque<Result<Executed, ApplyError>>>,
}

impl Recording {
    /// A writer whose every write succeeds.
    pub fn new() -> Recording {
        Recording::default()
    }

    /// Answers the next unscripted write with `outcome`; writes past the
    /// script succeed as if the API server took every part of the plan.
    pub fn then(self, outcome: Result<Executed, ApplyError>) -> Recording {
        lock(&self.script).push_back(outcome);
        self
    }

    /// Every plan asked for so far, in order.
    pub fn written(&self) -> Vec<Recorded> {
        lock(&self.written).clone()
    }
}

impl WritePlan for Recording {
    async fn write_plan(&self, obj: &DynamicObject, plan: &Plan) -> Result<Executed, ApplyError> {
        lock(&self.written).push(Recorded {
            object: display_name(obj.namespace().as_deref(), &obj.name_any()),
            plan: plan.clone(),
        });
        let scripted = lock(&self.script).pop_front();
        scripted.unwrap_or_else(|| Ok(all_written(plan)))
    }
}

/// What [`super::execute::execute`] reports when every write of `plan` succeeds.
fn all_written(plan: &Plan) -> Executed {
    let metadata = plan.metadata_writes();
    let first = metadata.first.iter();
    let last = metadata.last.iter();
    let patches: usize = first
        .chain(last)
        .map(|w| {
            usize::from(!w.annotations.is_empty())
                .max(usize::from(w.finalizer != FinalizerChange::Unchanged))
        })
        .sum();
    Executed {
        applied: plan.apply.len(),
        pruned: plan.prune.keys().cloned().collect(),
        events: plan.events.len(),
        status_written: plan.status.is_some(),
        metadata_patches: patches,
        annotated: !plan.annotations.is_empty(),
        finalizer: plan.finalizer,
        ..Executed::default()
    }
}
