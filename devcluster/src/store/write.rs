//! The write semantics kube-apiserver applies to every object: system metadata
//! (uid, creationTimestamp, generation, resourceVersion), optimistic concurrency,
//! status isolation, finalizers and deletionTimestamp, namespace existence.
//!
//! These run under the store lock on objects already in their storage version.

use std::sync::Arc;

use rand::Rng;
use serde_json::{Value, json};

use super::{EventType, State, now, rv_of};
use crate::registry::ResourceType;
use crate::status::ApiError;

const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";
const NS_KEY: &str = "/namespaces";

/// The outcome of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone; its last state.
    Gone(Arc<Value>),
    /// The object is being deleted (finalizers pending); its current state.
    Pending(Arc<Value>),
}

/// Options of a delete request (body DeleteOptions or query).
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// `preconditions.uid`: delete only this incarnation of the object.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only this version.
    pub precondition_rv: Option<String>,
    /// `dryRun=All`: check, change nothing.
    pub dry_run: bool,
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, fins: &[String]) {
    if fins.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        obj["metadata"]["finalizers"] = json!(fins);
    }
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// A random 5-character suffix from the alphabet kube-apiserver uses for generateName.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The part of an object whose change bumps `metadata.generation`.
fn spec_part(rt: &ResourceType, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if rt.status {
            m.remove("status");
        }
    }
    v
}

fn without_volatile(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    v
}

/// Marks a CRD accepted and established, the way the apiextensions controllers do.
fn accept_crd(obj: &mut Value) {
    let now = now();
    let storage = obj["spec"]["versions"]
        .as_array()
        .and_then(|vs| {
            vs.iter()
                .find(|v| v["storage"].as_bool() == Some(true))
                .or(vs.first())
        })
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut stored: Vec<String> = obj["status"]["storedVersions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if !stored.contains(&storage) {
        stored.push(storage);
    }
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    obj["status"] = json!({
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": obj["spec"]["names"].clone(),
        "storedVersions": stored,
    });
}

impl State {
    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        match self.get(NS_KEY, "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if is_deleting(&n) => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.qualified()
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Creates `obj` (storage version, namespace already set for namespaced types).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let resource = rt.key();
        if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            match obj["metadata"]["generateName"].as_str() {
                Some(prefix) if !prefix.is_empty() => {
                    obj["metadata"]["name"] = json!(format!("{prefix}{}", name_suffix()));
                }
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        &[(
                            "FieldValueRequired".into(),
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            }
        }
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let causes = crate::names::create_causes(rt, &obj);
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &name, &causes));
        }
        self.check_namespace(rt, &ns)?;
        if self.get(&resource, &ns, &name).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        {
            let m = &mut obj["metadata"];
            m["uid"] = json!(uuid::Uuid::new_v4().to_string());
            m["creationTimestamp"] = json!(now());
            m["generation"] = json!(1);
            if let Some(m) = m.as_object_mut() {
                m.remove("deletionTimestamp");
                m.remove("deletionGracePeriodSeconds");
                m.remove("resourceVersion");
            }
        }
        if rt.status
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        if resource == NS_KEY {
            obj["status"] = json!({"phase": "Active"});
            if obj["spec"]["finalizers"].is_null() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        if resource == CRD_KEY {
            accept_crd(&mut obj);
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let stored = self.put(&resource, obj, EventType::Added, None)?;
        if resource == CRD_KEY {
            self.registry.set_crd(&stored);
        }
        Ok(stored)
    }

    /// Replaces an object (storage version). `expect_rv` is the resourceVersion the
    /// new object was computed from; `sub` is `Some("status")` for the status subresource.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        mut new: Value,
        expect_rv: u64,
        sub: Option<&str>,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let resource = rt.key();
        let ns = new["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = new["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let old = self
            .get(&resource, &ns, &name)
            .ok_or_else(|| ApiError::not_found(rt, &name))?;
        if rv_of(&old) != expect_rv {
            return Err(ApiError::conflict(rt, &name));
        }
        let mut fin = if sub == Some("status") {
            let mut fin = (*old).clone();
            match new.get("status") {
                Some(s) => fin["status"] = s.clone(),
                None => {
                    if let Some(m) = fin.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(mf) = new["metadata"].get("managedFields") {
                fin["metadata"]["managedFields"] = mf.clone();
            }
            fin
        } else {
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old["metadata"].get(k) {
                    Some(v) => new["metadata"][k] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(k);
                        }
                    }
                }
            }
            if rt.status || resource == NS_KEY {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        };
        if is_deleting(&old) {
            let before = finalizers(&old);
            let added: Vec<String> = finalizers(&fin)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    &[(
                        "FieldValueForbidden".into(),
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                            quoted.join(", ")
                        ),
                    )],
                ));
            }
        }
        if resource == CRD_KEY && sub.is_none() {
            accept_crd(&mut fin);
        }
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        fin["metadata"]["generation"] = json!(if spec_part(rt, &fin) != spec_part(rt, &old) {
            generation + 1
        } else {
            generation
        });
        if without_volatile(&fin) == without_volatile(&old) {
            // A no-op write does not bump the resourceVersion (as kube-apiserver).
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(fin));
        }
        let deleting_done = is_deleting(&fin) && finalizers(&fin).is_empty();
        let crd_spec_changed = resource == CRD_KEY && fin["spec"] != old["spec"];
        let stored = self.put(&resource, fin, EventType::Modified, Some(old))?;
        if resource == CRD_KEY {
            self.registry.set_crd(&stored);
        }
        if crd_spec_changed
            && let Some(key) = self
                .registry
                .crd_key(stored["metadata"]["name"].as_str().unwrap_or_default())
        {
            // kube-apiserver serves a custom resource from storage built
            // for one CRD definition: a spec change (versions, schema,
            // conversion) tears that storage down, which ends the watches
            // opened on it (a second or more later; here at once), and the
            // clients' next watch gets the new definition. A watch here
            // keeps the definition it was opened with, so it must end too.
            self.watchers.remove(&key);
        }
        if deleting_done {
            return Ok(self.remove_object(&resource, &ns, &name)?.unwrap_or(stored));
        }
        if is_deleting(&stored) {
            self.gc_pending = true;
        }
        Ok(stored)
    }

    /// Removes an object for good, with what removal implies (a CRD's objects go too).
    pub fn remove_object(
        &mut self,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let last = self.remove(resource, ns, name)?;
        if resource == CRD_KEY
            && last.is_some()
            && let Some(key) = self.registry.remove_crd(name)
        {
            self.drop_resource(&key)?;
        }
        Ok(last)
    }

    /// Deletes an object: at once, or by setting deletionTimestamp while finalizers remain.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let resource = rt.key();
        let old = self
            .get(&resource, ns, name)
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let meta = &old["metadata"];
        if let Some(uid) = &opts.precondition_uid
            && meta["uid"].as_str() != Some(uid.as_str())
        {
            let why = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta["uid"].as_str().unwrap_or_default()
            );
            return Err(ApiError::conflict_msg(rt, name, &why));
        }
        if let Some(rv) = &opts.precondition_rv
            && meta["resourceVersion"].as_str() != Some(rv.as_str())
        {
            let why = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta["resourceVersion"].as_str().unwrap_or_default()
            );
            return Err(ApiError::conflict_msg(rt, name, &why));
        }
        if resource == NS_KEY {
            if is_deleting(&old) || opts.dry_run {
                return Ok(Deleted::Pending(old));
            }
            let mut new = (*old).clone();
            new["metadata"]["deletionTimestamp"] = json!(now());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            new["status"]["phase"] = json!("Terminating");
            let stored = self.put(&resource, new, EventType::Modified, Some(old))?;
            self.gc_pending = true;
            return Ok(Deleted::Pending(stored));
        }
        let mut fins = finalizers(&old);
        let extra = match opts.propagation.as_deref() {
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => None,
        };
        if let Some(f) = extra
            && !is_deleting(&old)
            && !fins.iter().any(|x| x == f)
        {
            fins.push(f.to_string());
        }
        if opts.dry_run {
            return Ok(if fins.is_empty() {
                Deleted::Gone(old)
            } else {
                Deleted::Pending(old)
            });
        }
        if fins.is_empty() {
            let last = self.remove_object(&resource, ns, name)?.unwrap_or(old);
            return Ok(Deleted::Gone(last));
        }
        if is_deleting(&old) && fins == finalizers(&old) {
            return Ok(Deleted::Pending(old));
        }
        let mut new = (*old).clone();
        if !is_deleting(&new) {
            new["metadata"]["deletionTimestamp"] = json!(now());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        set_finalizers(&mut new, &fins);
        let stored = self.put(&resource, new, EventType::Modified, Some(old))?;
        self.gc_pending = true;
        Ok(Deleted::Pending(stored))
    }

    /// Removes finalizer `f` from an object (used by garbage collection); removes
    /// the object when it was the last one on a deleting object.
    pub fn drop_finalizer(
        &mut self,
        resource: &str,
        ns: &str,
        name: &str,
        f: &str,
    ) -> Result<(), ApiError> {
        let Some(old) = self.get(resource, ns, name) else {
            return Ok(());
        };
        let fins: Vec<String> = finalizers(&old).into_iter().filter(|x| x != f).collect();
        if is_deleting(&old) && fins.is_empty() {
            self.remove_object(resource, ns, name)?;
            return Ok(());
        }
        let mut new = (*old).clone();
        set_finalizers(&mut new, &fins);
        self.put(resource, new, EventType::Modified, Some(old))?;
        Ok(())
    }

    /// Rewrites an object in place (used by garbage collection to drop ownerReferences).
    pub fn replace_raw(&mut self, resource: &str, new: Value) -> Result<(), ApiError> {
        let (ns, name) = super::obj_key(&new);
        let old = self.get(resource, &ns, &name);
        self.put(resource, new, EventType::Modified, old)?;
        Ok(())
    }
}

/// Whether the object carries a deletionTimestamp.
pub fn deleting(obj: &Value) -> bool {
    is_deleting(obj)
}

/// The object's finalizers.
pub fn finalizers_of(obj: &Value) -> Vec<String> {
    finalizers(obj)
}
