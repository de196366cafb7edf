//! Heap bytes per cached object: what the host's shared caches hold for
//! each WebApp, Deployment and Service, measured with a counting global
//! allocator.
//!
//! For each kind, N objects as the API server sends them (the realistic
//! objects of `support`: labels, annotations incl. kubectl's last-applied
//! copy, managedFields, a Deployment's defaults and status; each with its own
//! name and UID) are parsed from their JSON text the way a watch parses
//! them, trimmed, and filed into a kube-runtime reflector store and the
//! host's owner/namespace index (`cache::ObjectIndex`), exactly the
//! structures a reflector keeps. The live heap bytes after (the inputs
//! freed) minus before, divided by N, is the cost of one cached object.
//!
//! Four forms side by side: kube's `DynamicObject` with no trim (the object
//! as sent), with `managedFields` left out (what the host kept first), with
//! kubectl's last-applied copy left out too (what it kept until the compact
//! form), and the compact `cache::CachedObject` through
//! `cache::prepare_for_cache` (metadata typed, the body as JSON text: what
//! the caches keep now). A counting allocator rather
//! than RSS deltas: it measures exactly the bytes the caches keep, not the
//! allocator's arenas and fragmentation (RSS is what the scale benchmark
//! reports, whole process).
//!
//! `cargo bench -p wasm-operator --bench cache_bytes` (N = 10,000; an
//! argument sets N).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};
use wasm_operator::cache::{CachedObject, LAST_APPLIED_ANNOTATION, ObjectIndex, prepare_for_cache};

#[path = "support/mod.rs"]
mod support;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn delta(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded to `System` unchanged; only counts are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(delta(new_size) - delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Clone, Copy, PartialEq)]
enum Trim {
    None,
    ManagedFields,
    LastApplied,
    Compact,
}

impl Trim {
    const ALL: [Trim; 4] = [
        Trim::None,
        Trim::ManagedFields,
        Trim::LastApplied,
        Trim::Compact,
    ];

    fn label(self) -> &'static str {
        match self {
            Trim::None => "DynamicObject as sent",
            Trim::ManagedFields => "DynamicObject, managedFields left out",
            Trim::LastApplied => "DynamicObject, also kubectl's copy (before)",
            Trim::Compact => "CachedObject via prepare_for_cache (now)",
        }
    }
}

fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap_or_default());
    ApiResource::from_gvk(&gvk)
}

/// `n` copies of `template`, each with its own name and UID (and, for a
/// child, its own owner's UID), as the JSON text a watch receives.
fn texts(template: &Value, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut object = template.clone();
            let name = format!("app-{i:05}");
            object["metadata"]["name"] = json!(name);
            object["metadata"]["uid"] = json!(format!("{i:08}-0000-4000-8000-{:012}", i));
            if let Some(owner) = object.pointer_mut("/metadata/ownerReferences/0") {
                owner["name"] = json!(name);
                owner["uid"] = json!(format!("{i:08}-0000-4000-8000-owner"));
            }
            serde_json::to_vec(&object).expect("serializes")
        })
        .collect()
}

/// Live heap bytes per object held by a kube-runtime store of `inputs`
/// parsed as `K` and trimmed by `trim` (plus, for the compact form the
/// caches keep, the host's owner/namespace index).
fn bytes_in_store<K>(
    ar: &ApiResource,
    inputs: &[Vec<u8>],
    trim: impl Fn(&mut K),
    index: impl Fn(Vec<std::sync::Arc<K>>) -> Option<ObjectIndex>,
) -> f64
where
    K: kube::Resource<DynamicType = ApiResource> + Clone + serde::de::DeserializeOwned + 'static,
{
    let before = LIVE.load(Ordering::Relaxed);
    let mut writer: Writer<K> = Writer::new(ar.clone());
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    for text in inputs {
        let mut object: K = serde_json::from_slice(text).expect("parses");
        trim(&mut object);
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let index = index(store.state());
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(store.state().len(), inputs.len());
    drop((index, store, writer));
    held as f64 / inputs.len() as f64
}

/// Live heap bytes per object for one form ([`Trim`]).
fn bytes_per_object(ar: &ApiResource, inputs: &[Vec<u8>], trim: Trim) -> f64 {
    let no_index = |_: Vec<std::sync::Arc<DynamicObject>>| None;
    match trim {
        Trim::None => bytes_in_store(ar, inputs, |_: &mut DynamicObject| {}, no_index),
        Trim::ManagedFields => bytes_in_store(
            ar,
            inputs,
            |o: &mut DynamicObject| o.metadata.managed_fields = None,
            no_index,
        ),
        Trim::LastApplied => bytes_in_store(
            ar,
            inputs,
            |o: &mut DynamicObject| {
                o.metadata.managed_fields = None;
                if let Some(annotations) = o.metadata.annotations.as_mut() {
                    annotations.remove(LAST_APPLIED_ANNOTATION);
                }
            },
            no_index,
        ),
        Trim::Compact => bytes_in_store(
            ar,
            inputs,
            |o: &mut CachedObject| prepare_for_cache(o, ar),
            |objects| Some(ObjectIndex::of(objects)),
        ),
    }
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut templates = vec![support::webapp_object()];
    templates.extend(support::webapp_children());
    println!(
        "heap bytes per cached object in a kube-runtime store (the compact form with the host's owner/namespace index), N = {n} per kind"
    );
    let labels: Vec<&str> = Trim::ALL.iter().map(|t| t.label()).collect();
    println!("| kind | JSON as sent | {} |", labels.join(" | "));
    println!("|---|---|---|---|---|---|");
    let mut totals = [0.0; 4];
    for template in &templates {
        let ar = resource_of(template);
        let inputs = texts(template, n);
        let sent = inputs.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
        let mut row = format!("| {} | {sent:.0} B |", ar.kind);
        for (i, trim) in Trim::ALL.into_iter().enumerate() {
            let bytes = bytes_per_object(&ar, &inputs, trim);
            totals[i] += bytes;
            row.push_str(&format!(" {:.0} B ({:.1} KiB) |", bytes, bytes / 1024.0));
        }
        println!("{row}");
    }
    let per = templates.len() as f64;
    let means: Vec<String> = totals
        .iter()
        .map(|t| format!("{:.1} KiB", t / per / 1024.0))
        .collect();
    println!("| mean of the three | | {} |", means.join(" | "));
}
