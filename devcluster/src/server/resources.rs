//! Handlers for resource paths: get, list, watch, create, update, patch (every
//! patch type incl. server-side apply), delete, deletecollection, and the
//! status and scale subresources.

use std::sync::Arc;

use axum::body::Body;
use base64::Engine as _;
use http::{Method, Request, Response, header};
use serde_json::{Value, json};

use super::admission::{self, Admit};
use super::select::{FieldSelector, LabelSelector, Selector};
use super::{
    Query, ResourcePath, Shared, convert, error_response, json_response, read_body, table, watch,
};
use crate::patch::{self, PatchError, ssa};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::write::{DeleteOpts, Deleted};
use crate::store::{now, rv_of};

/// How many times a patch or unconditional update is recomputed when the object
/// changed between reading it and committing the result.
const MAX_RETRIES: usize = 16;

struct Ctx {
    shared: Arc<Shared>,
    rt: ResourceType,
    path: ResourcePath,
    q: Query,
    accept: String,
    content_type: String,
    user_agent: String,
}

/// Dispatches a resource request.
pub(super) async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    match handle_inner(shared, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn header_str(req: &Request<hyper::body::Incoming>, h: header::HeaderName) -> String {
    req.headers()
        .get(h)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

async fn handle_inner(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, ApiError> {
    let path = ResourcePath::parse(req.uri().path()).ok_or_else(not_found)?;
    let q = Query::parse(req.uri().query());
    let rt = shared
        .store
        .lock()
        .registry
        .find(&path.group, &path.version, &path.plural)
        .cloned()
        .ok_or_else(not_found)?;
    if !rt.namespaced && path.namespace.is_some() {
        return Err(not_found());
    }
    match path.subresource.as_deref() {
        None => {}
        Some("status") if rt.status => {}
        Some("scale") if rt.scale.is_some() => {}
        Some("finalize") if rt.plural == "namespaces" => {}
        Some(_) => return Err(not_found()),
    }
    let ctx = Ctx {
        accept: header_str(&req, header::ACCEPT),
        content_type: header_str(&req, header::CONTENT_TYPE),
        user_agent: header_str(&req, header::USER_AGENT),
        shared,
        rt,
        path,
        q,
    };
    let method = req.method().clone();
    let has_name = ctx.path.name.is_some();
    // Writes to a namespaced resource must name the namespace in the path.
    let collection_read = method == Method::GET || (method == Method::DELETE && !has_name);
    if ctx.rt.namespaced && ctx.path.namespace.is_none() && !collection_read {
        return Err(not_found());
    }
    match (method, has_name) {
        (Method::GET, false) if ctx.q.flag("watch") => {
            let selector = selector(&ctx)?;
            let output = output(&ctx);
            Ok(watch::watch(
                ctx.shared.clone(),
                ctx.rt.clone(),
                ctx.path.namespace.clone(),
                &ctx.q,
                selector,
                output,
            ))
        }
        (Method::GET, false) => list(&ctx).await,
        (Method::GET, true) => get(&ctx).await,
        (Method::POST, false) => {
            let body = read_body(req).await?;
            create(&ctx, &body).await
        }
        (Method::PUT, true) => {
            let body = read_body(req).await?;
            write(&ctx, Op::Update(parse_object(&ctx, &body)?)).await
        }
        (Method::PATCH, true) => {
            let body = read_body(req).await?;
            patch_request(&ctx, &body).await
        }
        (Method::DELETE, true) => {
            let body = read_body(req).await?;
            delete(&ctx, &body).await
        }
        (Method::DELETE, false) => {
            let body = read_body(req).await?;
            delete_collection(&ctx, &body).await
        }
        (m, _) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {m}"),
        )),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn selector(ctx: &Ctx) -> Result<Selector, ApiError> {
    Ok(Selector {
        labels: LabelSelector::parse(ctx.q.get("labelSelector").unwrap_or_default())?,
        fields: FieldSelector::parse(
            ctx.q.get("fieldSelector").unwrap_or_default(),
            &ctx.rt.group,
            &ctx.rt.plural,
        )?,
    })
}

fn dry_run(ctx: &Ctx) -> bool {
    ctx.q.get("dryRun") == Some("All")
}

fn field_manager(ctx: &Ctx) -> String {
    match ctx.q.non_empty("fieldManager") {
        Some(m) => m.to_string(),
        // Like kube-apiserver: the user agent's program name.
        None => ctx
            .user_agent
            .split('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    }
}

fn output(ctx: &Ctx) -> table::Output {
    table::Output::from_accept(&ctx.accept, ctx.q.get("includeObject"))
}

fn respond(ctx: &Ctx, code: u16, obj: Value) -> Response<Body> {
    json_response(code, &output(ctx).one(&ctx.rt, obj))
}

async fn current(ctx: &Ctx) -> Result<Option<Value>, ApiError> {
    let name = ctx.path.name.as_deref().unwrap_or_default();
    let ns = ctx.path.namespace.as_deref().unwrap_or_default();
    let obj = ctx.shared.store.lock().get(&ctx.rt.key(), ns, name);
    match obj {
        None => Ok(None),
        Some(o) => Ok(Some(
            convert::one(&ctx.shared, &ctx.rt, (*o).clone(), &ctx.rt.version).await?,
        )),
    }
}

async fn get(ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.path.name.as_deref().unwrap_or_default();
    let obj = current(ctx)
        .await?
        .ok_or_else(|| ApiError::not_found(&ctx.rt, name))?;
    if ctx.path.subresource.as_deref() == Some("scale") {
        return Ok(json_response(200, &scale_of(&ctx.rt, &obj)));
    }
    Ok(respond(ctx, 200, obj))
}

/// A continue token: the snapshot of the list's first page (see
/// [`super::snapshots`]) and where the next page starts in it.
#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    snapshot: u64,
    offset: usize,
}

async fn list(ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let sel = selector(ctx)?;
    let limit = ctx
        .q
        .non_empty("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let invalid =
        || ApiError::bad_request("invalid continue token; start the list again without it");
    let cont = match ctx.q.non_empty("continue") {
        None => None,
        Some(c) => {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .map_err(|_| invalid())?;
            Some(serde_json::from_slice::<ContinueToken>(&bytes).map_err(|_| invalid())?)
        }
    };
    let ns = ctx.path.namespace.as_deref();
    let (rv, mut items, more, snapshot, offset) = match &cont {
        // A later page: from the first page's snapshot, never the store as
        // it is now (kube-apiserver reads it at the first page's revision).
        Some(t) => {
            let page = ctx.shared.lists.page(t.snapshot, t.offset, limit).ok_or_else(|| {
                ApiError::new(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".to_string(),
                )
            })?;
            let offset = t.offset + page.items.len();
            (
                page.resource_version,
                page.items,
                page.remaining,
                t.snapshot,
                offset,
            )
        }
        None => {
            let (rv, mut all) = {
                let st = ctx.shared.store.lock();
                let all: Vec<Arc<Value>> = st
                    .list(&ctx.rt.key(), ns)
                    .into_iter()
                    .filter(|o| sel.matches(o))
                    .collect();
                (st.rv, all)
            };
            match limit {
                Some(l) if all.len() > l => {
                    let rest = all.split_off(l);
                    let more = rest.len();
                    let snapshot = ctx.shared.lists.keep(rv, rest);
                    (rv, all, more, snapshot, 0)
                }
                _ => (rv, all, 0, 0, 0),
            }
        }
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if more > 0 {
        let tok = serde_json::to_vec(&ContinueToken {
            rv,
            snapshot,
            offset,
        })
        .map_err(|e| ApiError::internal(e.to_string()))?;
        meta["continue"] = json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tok));
        meta["remainingItemCount"] = json!(more);
    }
    let objs: Vec<Value> = items.drain(..).map(|o| (*o).clone()).collect();
    let objs = convert::to_version(&ctx.shared, &ctx.rt, objs, &ctx.rt.version).await?;
    Ok(json_response(200, &output(ctx).list(&ctx.rt, objs, meta)))
}

/// What a write does to the object it read.
enum Op {
    Create(Value),
    Update(Value),
    Patch(PatchKind, Value),
    Apply(Value, bool),
}

#[derive(Clone, Copy)]
enum PatchKind {
    Merge,
    Json,
    Strategic,
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::NotApplicable(m) => ApiError::new(422, "Invalid", m),
    }
}

fn apply_error(rt: &ResourceType, name: &str, e: ssa::ApplyError) -> ApiError {
    match e {
        ssa::ApplyError::Conflicts(cs) => {
            let message = ssa::conflict_message(&cs);
            let causes: Vec<Value> = cs
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": ssa::conflict_cause_message(c), "field": c.field}))
                .collect();
            let mut err = ApiError::new(409, "Conflict", message);
            err.details = Some(Box::new(
                json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes}),
            ));
            err
        }
        ssa::ApplyError::Invalid(m) => ApiError::new(422, "Invalid", m),
    }
}

async fn patch_request(ctx: &Ctx, body: &[u8]) -> Result<Response<Body>, ApiError> {
    let ct = ctx
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    let op = match ct {
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            if ctx.q.non_empty("fieldManager").is_none() {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            let v: Value = serde_yaml::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the apply configuration is not valid YAML or JSON: {e}"
                ))
            })?;
            Op::Apply(v, ctx.q.flag("force"))
        }
        "application/merge-patch+json" => Op::Patch(PatchKind::Merge, parse_json(body)?),
        "application/json-patch+json" => Op::Patch(PatchKind::Json, parse_json(body)?),
        "application/strategic-merge-patch+json" => {
            Op::Patch(PatchKind::Strategic, parse_json(body)?)
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
                ),
            ));
        }
    };
    write(ctx, op).await
}

/// Parses a create/update body: JSON, or protobuf for the kinds kubectl sends that way.
fn parse_object(ctx: &Ctx, body: &[u8]) -> Result<Value, ApiError> {
    if super::protobuf::is_protobuf(&ctx.content_type) {
        super::protobuf::decode(body)
    } else {
        parse_json(body)
    }
}

async fn create(ctx: &Ctx, body: &[u8]) -> Result<Response<Body>, ApiError> {
    let obj = parse_object(ctx, body)?;
    write(ctx, Op::Create(obj)).await
}

/// The autoscaling/v1 Scale view of an object.
fn scale_of(rt: &ResourceType, obj: &Value) -> Value {
    let Some(sc) = &rt.scale else {
        return Value::Null;
    };
    let spec = table::jsonpath(obj, &sc.spec_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let status = table::jsonpath(obj, &sc.status_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let mut selector = sc
        .label_selector_path
        .as_deref()
        .and_then(|p| table::jsonpath(obj, p))
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(m) = selector.get("matchLabels").and_then(Value::as_object) {
        let parts: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        selector = json!(parts.join(","));
    }
    let m = &obj["metadata"];
    let mut out = json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"], "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]},
        "spec": {"replicas": spec}, "status": {"replicas": status},
    });
    if selector.is_string() {
        out["status"]["selector"] = selector;
    }
    out
}

/// Sets `.a.b` in `obj` to `v`, creating objects on the way.
fn set_path(obj: &mut Value, path: &str, v: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i + 1 == parts.len() {
            cur[*p] = v;
            return;
        }
        cur = &mut cur[*p];
    }
}

/// The outcome of computing a write from the current object.
struct Computed {
    desired: Value,
    expect_rv: u64,
    creating: bool,
}

fn compute(ctx: &Ctx, op: &Op, cur: Option<&Value>) -> Result<Computed, ApiError> {
    let name = ctx.path.name.clone().unwrap_or_default();
    let rt = &ctx.rt;
    let sub = ctx.path.subresource.as_deref();
    let now = now();
    let manager = field_manager(ctx);
    let api_version = rt.api_version();
    let info = ssa::WriteInfo {
        manager: &manager,
        api_version: &api_version,
        subresource: sub.filter(|s| *s == "status"),
        now: &now,
    };
    let scale = sub == Some("scale");
    // The scale subresource works on the Scale view and maps spec.replicas back.
    let view = |o: &Value| if scale { scale_of(rt, o) } else { o.clone() };
    let unview = |cur: &Value, v: Value| -> Value {
        if !scale {
            return v;
        }
        let mut out = cur.clone();
        if let Some(sc) = &rt.scale {
            set_path(
                &mut out,
                &sc.spec_replicas_path,
                v["spec"]["replicas"].clone(),
            );
        }
        out
    };
    let (mut desired, expect_rv, creating) = match op {
        Op::Create(body) => (body.clone(), 0, true),
        Op::Update(body) => {
            let cur = cur.ok_or_else(|| ApiError::not_found(rt, &name))?;
            let expect = match body["metadata"]["resourceVersion"]
                .as_str()
                .filter(|s| !s.is_empty())
            {
                Some(rv) => rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?,
                None => rv_of(cur),
            };
            if let Some(n) = body["metadata"]["name"].as_str()
                && n != name
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            (unview(cur, body.clone()), expect, false)
        }
        Op::Patch(kind, p) => {
            let cur = cur.ok_or_else(|| ApiError::not_found(rt, &name))?;
            let base = view(cur);
            let patched = match kind {
                PatchKind::Merge => patch::merge_patch(&base, p),
                PatchKind::Json => patch::json_patch(&base, p).map_err(patch_error)?,
                PatchKind::Strategic => {
                    patch::strategic_merge_patch(&base, p).map_err(patch_error)?
                }
            };
            // A resourceVersion in the patch is a precondition, like kube-apiserver.
            let expect = if scale { rv_of(cur) } else { rv_of(&patched) };
            (unview(cur, patched), expect, false)
        }
        Op::Apply(applied, force) => {
            if scale {
                return Err(ApiError::bad_request(
                    "server-side apply to the scale subresource is not supported by the devcluster; use a merge patch",
                ));
            }
            let merged =
                ssa::apply(cur, applied, info, *force).map_err(|e| apply_error(rt, &name, e))?;
            (merged, cur.map(rv_of).unwrap_or(0), cur.is_none())
        }
    };
    if !desired.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    desired["apiVersion"] = json!(api_version);
    desired["kind"] = json!(rt.kind);
    if !desired["metadata"].is_object() {
        desired["metadata"] = json!({});
    }
    match (
        &ctx.path.namespace,
        desired["metadata"]["namespace"].as_str(),
    ) {
        (Some(ns), Some(b)) if !b.is_empty() && b != ns => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(ns), _) => desired["metadata"]["namespace"] = json!(ns),
        (None, _) => {
            if let Some(m) = desired["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
    }
    if !creating || !name.is_empty() {
        if let Some(b) = desired["metadata"]["name"]
            .as_str()
            .filter(|b| !b.is_empty())
            && !name.is_empty()
            && b != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({b}) does not match the name on the URL ({name})"
            )));
        }
        if !name.is_empty() {
            desired["metadata"]["name"] = json!(name);
        }
    }
    check_shape(rt, &desired)?;
    // Status isolation before admission, so validation sees what will be stored.
    if let Some(cur) = cur
        && ctx.rt.status
    {
        match sub {
            Some("status") => {
                let mut d = cur.clone();
                d["status"] = desired.get("status").cloned().unwrap_or(Value::Null);
                if d["status"].is_null()
                    && let Some(m) = d.as_object_mut()
                {
                    m.remove("status");
                }
                if let Some(mf) = desired["metadata"].get("managedFields") {
                    d["metadata"]["managedFields"] = mf.clone();
                }
                desired = d;
            }
            _ => match cur.get("status") {
                Some(s) => desired["status"] = s.clone(),
                None => {
                    if let Some(m) = desired.as_object_mut() {
                        m.remove("status");
                    }
                }
            },
        }
    }
    if !matches!(op, Op::Apply(..)) {
        ssa::record_update(cur, &mut desired, info);
    }
    Ok(Computed {
        desired,
        expect_rv,
        creating,
    })
}

/// Refuses objects whose well-known fields have the wrong JSON type (422), so
/// later steps can rely on `metadata.labels` being an object and so on.
fn check_shape(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let m = &obj["metadata"];
    let checks: [(&str, &Value, bool); 6] = [
        ("metadata.labels", &m["labels"], true),
        ("metadata.annotations", &m["annotations"], true),
        ("metadata.finalizers", &m["finalizers"], false),
        ("metadata.ownerReferences", &m["ownerReferences"], false),
        ("spec", &obj["spec"], true),
        ("status", &obj["status"], true),
    ];
    for (field, v, want_object) in checks {
        let ok = v.is_null()
            || if want_object {
                v.is_object()
            } else {
                v.is_array()
            };
        if !ok {
            let want = if want_object { "object" } else { "array" };
            return Err(ApiError::invalid(
                rt,
                name,
                &[(
                    "FieldValueTypeInvalid".into(),
                    field.into(),
                    format!("Invalid value: {v}: must be an {want}"),
                )],
            ));
        }
    }
    Ok(())
}

async fn write(ctx: &Ctx, op: Op) -> Result<Response<Body>, ApiError> {
    let name = ctx.path.name.clone().unwrap_or_default();
    let sub = ctx.path.subresource.as_deref();
    let dry = dry_run(ctx);
    for _ in 0..MAX_RETRIES {
        let cur = if matches!(op, Op::Create(_)) {
            None
        } else {
            current(ctx).await?
        };
        let Computed {
            mut desired,
            expect_rv,
            creating,
        } = compute(ctx, &op, cur.as_ref())?;
        // Status writes are validated too: the status schema is part of the object's.
        admission::schema(&ctx.rt, &mut desired)?;
        let obj_name = desired["metadata"]["name"]
            .as_str()
            .unwrap_or(&name)
            .to_string();
        let admitted = admission::webhooks(
            &ctx.shared,
            Admit {
                rt: &ctx.rt,
                operation: if creating { "CREATE" } else { "UPDATE" },
                subresource: sub,
                namespace: ctx.path.namespace.as_deref(),
                name: &obj_name,
                old: cur.clone(),
                dry_run: dry,
            },
            Some(desired),
        )
        .await?
        .ok_or_else(|| ApiError::internal("admission returned no object"))?;
        let storage = convert::to_storage(&ctx.shared, &ctx.rt, admitted).await?;
        let result = {
            let mut st = ctx.shared.store.lock();
            let r = if creating {
                st.create(&ctx.rt, storage, dry)
            } else {
                st.update(
                    &ctx.rt,
                    storage,
                    expect_rv,
                    sub.filter(|s| *s == "status"),
                    dry,
                )
            };
            if r.is_ok() {
                crate::gc::collect(&mut st)?;
            }
            r
        };
        match result {
            Ok(stored) => {
                let out =
                    convert::one(&ctx.shared, &ctx.rt, (*stored).clone(), &ctx.rt.version).await?;
                if sub == Some("scale") {
                    return Ok(json_response(200, &scale_of(&ctx.rt, &out)));
                }
                return Ok(respond(ctx, if creating { 201 } else { 200 }, out));
            }
            // The object changed since it was read: recompute unless the client asked
            // for a specific resourceVersion.
            Err(e)
                if e.code == 409
                    && e.reason == "Conflict"
                    && retryable(&op, cur.as_ref(), expect_rv) =>
            {
                continue;
            }
            Err(e)
                if e.code == 409 && e.reason == "AlreadyExists" && matches!(op, Op::Apply(..)) =>
            {
                continue;
            }
            Err(e) if e.code == 404 && matches!(op, Op::Apply(..)) && !creating => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::new(
        409,
        "Conflict",
        format!("the object {name:?} kept changing while the request was applied; retry"),
    ))
}

fn retryable(op: &Op, cur: Option<&Value>, expect_rv: u64) -> bool {
    match op {
        Op::Create(_) => false,
        Op::Apply(..) => true,
        // The client sent no resourceVersion (or the same as read): it was unconditional.
        Op::Update(body) => body["metadata"]["resourceVersion"]
            .as_str()
            .is_none_or(str::is_empty),
        Op::Patch(..) => cur.is_some_and(|c| rv_of(c) == expect_rv),
    }
}

fn delete_opts(ctx: &Ctx, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_json(body)?
    };
    let dry = dry_run(ctx)
        || b["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    let mut propagation = ctx
        .q
        .non_empty("propagationPolicy")
        .or(b["propagationPolicy"].as_str())
        .map(String::from);
    if propagation.is_none() && b["orphanDependents"].as_bool() == Some(true) {
        propagation = Some("Orphan".into());
    }
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
    {
        return Err(ApiError::bad_request(format!(
            "invalid propagationPolicy {p:?}: use Background, Foreground or Orphan"
        )));
    }
    Ok(DeleteOpts {
        propagation,
        precondition_uid: b["preconditions"]["uid"].as_str().map(String::from),
        precondition_rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        dry_run: dry,
    })
}

fn success_status(rt: &ResourceType, obj: &Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
           "details": {"name": obj["metadata"]["name"], "group": rt.group, "kind": rt.plural, "uid": obj["metadata"]["uid"]}})
}

async fn delete(ctx: &Ctx, body: &[u8]) -> Result<Response<Body>, ApiError> {
    if ctx.path.subresource.is_some() {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    let opts = delete_opts(ctx, body)?;
    let name = ctx.path.name.clone().unwrap_or_default();
    let ns = ctx.path.namespace.clone().unwrap_or_default();
    let old = current(ctx)
        .await?
        .ok_or_else(|| ApiError::not_found(&ctx.rt, &name))?;
    admission::webhooks(
        &ctx.shared,
        Admit {
            rt: &ctx.rt,
            operation: "DELETE",
            subresource: None,
            namespace: ctx.path.namespace.as_deref(),
            name: &name,
            old: Some(old),
            dry_run: opts.dry_run,
        },
        None,
    )
    .await?;
    let outcome = {
        let mut st = ctx.shared.store.lock();
        let r = st.delete(&ctx.rt, &ns, &name, &opts)?;
        crate::gc::collect(&mut st)?;
        r
    };
    match outcome {
        Deleted::Gone(last) => Ok(json_response(200, &success_status(&ctx.rt, &last))),
        Deleted::Pending(obj) => {
            let out = convert::one(&ctx.shared, &ctx.rt, (*obj).clone(), &ctx.rt.version).await?;
            Ok(json_response(200, &out))
        }
    }
}

async fn delete_collection(ctx: &Ctx, body: &[u8]) -> Result<Response<Body>, ApiError> {
    let opts = delete_opts(ctx, body)?;
    let sel = selector(ctx)?;
    let ns = ctx.path.namespace.as_deref();
    let mut deleted = Vec::new();
    {
        let mut st = ctx.shared.store.lock();
        let targets: Vec<(String, String)> = st
            .list(&ctx.rt.key(), ns)
            .iter()
            .filter(|o| sel.matches(o))
            .map(|o| crate::store::obj_key(o))
            .collect();
        for (ons, oname) in targets {
            match st.delete(&ctx.rt, &ons, &oname, &opts) {
                Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => deleted.push((*o).clone()),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        crate::gc::collect(&mut st)?;
    }
    let items = convert::to_version(&ctx.shared, &ctx.rt, deleted, &ctx.rt.version).await?;
    let rv = ctx.shared.store.lock().rv;
    Ok(json_response(
        200,
        &json!({"kind": ctx.rt.list_kind, "apiVersion": ctx.rt.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}
