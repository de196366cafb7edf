//! Garbage collection: ownerReference cascades (Background, Foreground, Orphan)
//! and namespace deletion.
//!
//! Runs synchronously under the store lock after writes that may leave work
//! (a delete, an update of a deleting object), repeating until nothing changes,
//! so clients observe the same end states as with kube-controller-manager.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::status::ApiError;
use crate::store::State;
use crate::store::write::{DeleteOpts, deleting, finalizers_of};

enum Action {
    Delete {
        resource: String,
        ns: String,
        name: String,
    },
    DropOwnerRef {
        resource: String,
        owner_uid: String,
        obj: Value,
    },
    DropFinalizer {
        resource: String,
        ns: String,
        name: String,
        finalizer: &'static str,
    },
    RemoveNamespace {
        name: String,
    },
}

fn meta_str<'a>(obj: &'a Value, k: &str) -> &'a str {
    obj["metadata"][k].as_str().unwrap_or_default()
}

/// Runs garbage collection until it converges (when anything is pending).
pub fn collect(st: &mut State) -> Result<(), ApiError> {
    if !st.gc_pending {
        return Ok(());
    }
    st.gc_pending = false;
    for _ in 0..1000 {
        let actions = plan(st);
        if actions.is_empty() {
            return Ok(());
        }
        for a in actions {
            apply(st, a)?;
        }
    }
    Ok(())
}

fn plan(st: &State) -> Vec<Action> {
    let all = st.all_objects();
    // uid -> (deleting, finalizers) of every live object.
    let mut owners: HashMap<&str, (bool, Vec<String>)> = HashMap::new();
    for (_, o) in &all {
        owners.insert(meta_str(o, "uid"), (deleting(o), finalizers_of(o)));
    }
    let mut actions = Vec::new();
    // Owners that still have (blocking) dependents.
    let mut has_dependents: HashSet<String> = HashSet::new();
    let mut has_blocking: HashSet<String> = HashSet::new();
    for (res, o) in &all {
        let Some(refs) = o["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        if refs.is_empty() {
            continue;
        }
        let mut all_gone = true;
        let mut delete_for_foreground = false;
        for r in refs {
            let uid = r["uid"].as_str().unwrap_or_default();
            match owners.get(uid) {
                None => {}
                Some((owner_deleting, fins)) => {
                    all_gone = false;
                    has_dependents.insert(uid.to_string());
                    if r["blockOwnerDeletion"].as_bool() == Some(true) {
                        has_blocking.insert(uid.to_string());
                    }
                    if *owner_deleting && fins.iter().any(|f| f == "orphan") {
                        actions.push(Action::DropOwnerRef {
                            resource: res.clone(),
                            owner_uid: uid.to_string(),
                            obj: (**o).clone(),
                        });
                    } else if *owner_deleting && fins.iter().any(|f| f == "foregroundDeletion") {
                        delete_for_foreground = true;
                    }
                }
            }
        }
        if (all_gone || delete_for_foreground) && !deleting(o) {
            let (ns, name) = crate::store::obj_key(o);
            actions.push(Action::Delete {
                resource: res.clone(),
                ns,
                name,
            });
        }
    }
    if !actions.is_empty() {
        return actions;
    }
    for (res, o) in &all {
        if !deleting(o) {
            continue;
        }
        let uid = meta_str(o, "uid");
        let fins = finalizers_of(o);
        let (ns, name) = crate::store::obj_key(o);
        if fins.iter().any(|f| f == "orphan") && !has_dependents.contains(uid) {
            actions.push(Action::DropFinalizer {
                resource: res.clone(),
                ns: ns.clone(),
                name: name.clone(),
                finalizer: "orphan",
            });
        } else if fins.iter().any(|f| f == "foregroundDeletion") && !has_blocking.contains(uid) {
            actions.push(Action::DropFinalizer {
                resource: res.clone(),
                ns: ns.clone(),
                name: name.clone(),
                finalizer: "foregroundDeletion",
            });
        }
        if res == "/namespaces" {
            let contents = st.in_namespace(&name);
            if contents.is_empty() {
                if fins.is_empty() {
                    actions.push(Action::RemoveNamespace { name });
                }
            } else {
                for (r, c) in contents {
                    if !deleting(&c) {
                        let (cns, cname) = crate::store::obj_key(&c);
                        actions.push(Action::Delete {
                            resource: r,
                            ns: cns,
                            name: cname,
                        });
                    }
                }
            }
        }
    }
    actions
}

fn apply(st: &mut State, action: Action) -> Result<(), ApiError> {
    match action {
        Action::Delete { resource, ns, name } => {
            let Some(rt) = st.registry.by_key(&resource).cloned() else {
                st.remove_object(&resource, &ns, &name)?;
                return Ok(());
            };
            match st.delete(&rt, &ns, &name, &DeleteOpts::default()) {
                Ok(_) => Ok(()),
                Err(e) if e.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }
        Action::DropOwnerRef {
            resource,
            owner_uid,
            obj,
        } => {
            let (ns, name) = crate::store::obj_key(&obj);
            // Re-read: an earlier action in this round may have changed the object.
            let Some(cur) = st.get(&resource, &ns, &name) else {
                return Ok(());
            };
            let mut new = (*cur).clone();
            if let Some(refs) = new["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(owner_uid.as_str()));
                if refs.is_empty()
                    && let Some(m) = new["metadata"].as_object_mut()
                {
                    m.remove("ownerReferences");
                }
            }
            st.replace_raw(&resource, new)
        }
        Action::DropFinalizer {
            resource,
            ns,
            name,
            finalizer,
        } => st.drop_finalizer(&resource, &ns, &name, finalizer),
        Action::RemoveNamespace { name } => st.remove_object("/namespaces", "", &name).map(|_| ()),
    }
}
