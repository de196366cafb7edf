//! Compiling components, with a disk cache of compiled artifacts.
//!
//! Key: sha256 of the component bytes + the engine's compatibility hash
//! (wasmtime version, target, every codegen-relevant setting). A change of
//! either produces a different file name, so a stale artifact is never loaded.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use super::error::EngineError;

/// How a component came to be ready to instantiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadStats {
    /// True when Cranelift compiled the component during this load; false when
    /// the compiled artifact came from the disk cache.
    pub compiled: bool,
    /// Time spent compiling or deserializing.
    pub duration: Duration,
}

/// Hit/miss counters of an engine's disk cache.
#[derive(Debug, Default)]
pub(crate) struct CacheCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

/// The engine configuration part of the cache key, as hex.
pub(crate) fn compatibility_key(engine: &wasmtime::Engine) -> String {
    // DefaultHasher::new() uses fixed keys, so the value is stable across
    // processes built by the same compiler; a different compiler at worst
    // causes one recompilation.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Compiles `bytes`, or loads the compiled artifact from `cache_dir`.
pub(crate) fn load_component(
    engine: &wasmtime::Engine,
    compat_key: &str,
    cache_dir: Option<&Path>,
    counters: &CacheCounters,
    bytes: &[u8],
    digest_hex: &str,
    digest: &str,
) -> Result<(Component, LoadStats), EngineError> {
    let started = Instant::now();
    let path = cache_dir.map(|dir| dir.join(format!("{digest_hex}-{compat_key}.cwasm")));
    if let Some(path) = &path
        && path.is_file()
    {
        // SAFETY: `deserialize_file` trusts its input to be a wasmtime
        // artifact (it maps it as executable code). The file name contains
        // the sha256 of the component and the engine's compatibility hash,
        // and only `store_artifact` below writes such names, from
        // `Component::serialize` of that very component by an engine with that
        // very configuration, atomically (temp file + rename), into the cache
        // directory the host owns. Wasmtime additionally checks the artifact's
        // header and compatibility before using it.
        #[allow(unsafe_code)] // the host's only unsafe block; see SAFETY above
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => {
                counters.hits.fetch_add(1, Ordering::Relaxed);
                return Ok((
                    component,
                    LoadStats {
                        compiled: false,
                        duration: started.elapsed(),
                    },
                ));
            }
            Err(e) => {
                // A truncated or foreign file: recompile and overwrite it.
                tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compiled-component cache entry");
            }
        }
    }
    counters.misses.fetch_add(1, Ordering::Relaxed);
    let component = Component::new(engine, bytes).map_err(|e| EngineError::Compile {
        digest: digest.to_string(),
        message: format!("{e:#}"),
    })?;
    let stats = LoadStats {
        compiled: true,
        duration: started.elapsed(),
    };
    if let Some(path) = &path {
        let artifact = component
            .serialize()
            .map_err(|e| EngineError::Cache(format!("cannot serialize {digest}: {e}")))?;
        store_artifact(path, &artifact)?;
    }
    Ok((component, stats))
}

/// Writes `artifact` to `path` atomically: concurrent loaders never see a
/// partial file.
fn store_artifact(path: &Path, artifact: &[u8]) -> Result<(), EngineError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| EngineError::Io { path, source }
    };
    let tmp: PathBuf = path.with_extension(format!(
        "tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, artifact).map_err(io(&tmp))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    Ok(())
}
