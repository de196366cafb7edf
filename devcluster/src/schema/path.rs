//! Field paths written the way kube-apiserver writes them in causes:
//! `spec.replicas`, `spec.containers[0].name`, `spec.labels[foo]`.

/// Path of a named property below `parent`.
pub fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// Path of the `index`th item of the array at `parent`.
pub fn index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Path of the member `key` of the map (additionalProperties) at `parent`.
pub fn key(parent: &str, key: &str) -> String {
    format!("{parent}[{key}]")
}

/// How a path is named inside a message (`<path> in body ...`); the root has no name.
pub fn display(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}
