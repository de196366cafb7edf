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
//! Three trims side by side: none (the object as sent), `managedFields`
//! only (what the host did before), and `cache::prepare_for_cache` (what it
//! does now: also kubectl's last-applied copy). A counting allocator rather
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
use wasm_operator::cache::{ObjectIndex, prepare_for_cache};

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
    Cache,
}

impl Trim {
    fn label(self) -> &'static str {
        match self {
            Trim::None => "as sent",
            Trim::ManagedFields => "managedFields stripped (before)",
            Trim::Cache => "prepare_for_cache (now)",
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

/// Live heap bytes per object held by a store and index of `inputs`.
fn bytes_per_object(ar: &ApiResource, inputs: &[Vec<u8>], trim: Trim) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    let mut writer: Writer<DynamicObject> = Writer::new(ar.clone());
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    for text in inputs {
        let mut object: DynamicObject = serde_json::from_slice(text).expect("parses");
        match trim {
            Trim::None => {}
            Trim::ManagedFields => object.metadata.managed_fields = None,
            Trim::Cache => prepare_for_cache(&mut object, ar),
        }
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let index = ObjectIndex::of(store.state());
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(store.state().len(), inputs.len());
    drop((index, store, writer));
    held as f64 / inputs.len() as f64
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut templates = vec![support::webapp_object()];
    templates.extend(support::webapp_children());
    println!("heap bytes per cached object (store + owner/namespace index), N = {n} per kind");
    println!(
        "| kind | JSON as sent | {} | {} | {} |",
        Trim::None.label(),
        Trim::ManagedFields.label(),
        Trim::Cache.label()
    );
    println!("|---|---|---|---|---|");
    let mut totals = [0.0; 3];
    for template in &templates {
        let ar = resource_of(template);
        let inputs = texts(template, n);
        let sent = inputs.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
        let mut row = format!("| {} | {sent:.0} B |", ar.kind);
        for (i, trim) in [Trim::None, Trim::ManagedFields, Trim::Cache]
            .into_iter()
            .enumerate()
        {
            let bytes = bytes_per_object(&ar, &inputs, trim);
            totals[i] += bytes;
            row.push_str(&format!(" {:.0} B ({:.1} KiB) |", bytes, bytes / 1024.0));
        }
        println!("{row}");
    }
    let per = templates.len() as f64;
    println!(
        "| mean of the three | | {:.1} KiB | {:.1} KiB | {:.1} KiB |",
        totals[0] / per / 1024.0,
        totals[1] / per / 1024.0,
        totals[2] / per / 1024.0
    );
}
