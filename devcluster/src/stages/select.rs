//! Which stage applies to an object, and when: selector evaluation, the
//! weighted choice among matching stages and the delay with jitter, as kwok's
//! `pkg/utils/lifecycle` computes them. Pure: randomness comes in as a
//! function `roll(n)` answering a number in `0..n`.

use std::time::Duration;

use serde_json::Value;

use super::model::SelectorOperator;
use super::query::Query;
use super::{CompiledStage, Requirement};

/// kwok's `hasValue`: strings, booleans and integers compare as text.
fn has_value(v: &Value, values: &[String]) -> bool {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => return false,
        },
        _ => return false,
    };
    values.contains(&text)
}

/// Whether one requirement holds on `obj`.
pub fn requirement_holds(r: &Requirement, obj: &Value) -> bool {
    let data = r.query.execute(obj);
    match r.operator {
        SelectorOperator::In => data.iter().any(|d| has_value(d, &r.values)),
        SelectorOperator::NotIn => !data.iter().any(|d| has_value(d, &r.values)),
        SelectorOperator::Exists => !data.is_empty(),
        SelectorOperator::DoesNotExist => data.is_empty(),
    }
}

fn map_matches(want: &Option<std::collections::BTreeMap<String, String>>, have: &Value) -> bool {
    want.as_ref().is_none_or(|want| {
        want.iter()
            .all(|(k, v)| have[k.as_str()].as_str() == Some(v.as_str()))
    })
}

/// Whether `stage` applies to `obj` (kind, labels, annotations, expressions).
/// A stage without a selector never applies, as in kwok.
pub fn matches(stage: &CompiledStage, obj: &Value) -> bool {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    if !stage.stage.applies_to(api_version, kind) {
        return false;
    }
    let Some(selector) = &stage.stage.spec.selector else {
        return false;
    };
    map_matches(&selector.match_labels, &obj["metadata"]["labels"])
        && map_matches(&selector.match_annotations, &obj["metadata"]["annotations"])
        && stage.requirements.iter().all(|r| requirement_holds(r, obj))
}

/// The stage's weight on `obj`: `weightFrom` when it yields an integer, else `weight`.
pub fn weight(stage: &CompiledStage, obj: &Value) -> i64 {
    stage
        .weight_from
        .as_ref()
        .and_then(|q| q.execute(obj).into_iter().next())
        .and_then(|v| match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        })
        .unwrap_or(stage.stage.spec.weight)
}

/// Picks one of the `matching` stages as kwok's `Lifecycle.Match` does: when
/// some weights are positive, at random in proportion to them (stages of
/// weight 0 never win then); otherwise uniformly.
pub fn choose<'a>(
    matching: &[&'a CompiledStage],
    obj: &Value,
    mut roll: impl FnMut(u64) -> u64,
) -> Option<&'a CompiledStage> {
    match matching {
        [] => return None,
        [only] => return Some(only),
        _ => {}
    }
    let weights: Vec<u64> = matching
        .iter()
        .map(|s| weight(s, obj).max(0) as u64)
        .collect();
    let total: u64 = weights.iter().sum();
    if total == 0 {
        return Some(matching[roll(matching.len() as u64) as usize % matching.len()]);
    }
    let mut off = roll(total);
    for (stage, w) in matching.iter().zip(&weights) {
        if *w == 0 {
            continue;
        }
        if off < *w {
            return Some(stage);
        }
        off -= w;
    }
    matching.last().copied()
}

/// A duration read by a `*From` expression: a Go duration (`1s`, `500ms`)
/// or an RFC 3339 time (the time left until it).
fn duration_from(
    q: &Option<Query>,
    obj: &Value,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let v = q.as_ref()?.execute(obj).into_iter().next()?;
    let text = v.as_str()?;
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        let left = t.with_timezone(&chrono::Utc) - now;
        return Some(left.to_std().unwrap_or_default());
    }
    go_duration(text)
}

/// Parses a Go duration such as `1.5s`, `300ms`, `2m30s`, `1h`.
pub fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

fn millis(ms: Option<i64>) -> Option<Duration> {
    ms.map(|m| Duration::from_millis(m.max(0) as u64))
}

/// How long to wait before applying `stage` to `obj`, as kwok's `Stage.Delay`:
/// the duration, raised at random up to the jitter bound when one is set
/// (a bound below the duration is the delay).
pub fn delay(
    stage: &CompiledStage,
    obj: &Value,
    now: chrono::DateTime<chrono::Utc>,
    roll: impl FnOnce(u64) -> u64,
) -> Duration {
    let Some(d) = &stage.stage.spec.delay else {
        return Duration::ZERO;
    };
    let Some(base) =
        duration_from(&stage.duration_from, obj, now).or(millis(d.duration_milliseconds))
    else {
        return Duration::ZERO;
    };
    let Some(jitter) =
        duration_from(&stage.jitter_from, obj, now).or(millis(d.jitter_duration_milliseconds))
    else {
        return base;
    };
    if jitter <= base {
        return jitter;
    }
    let span = (jitter - base).as_millis() as u64;
    base + Duration::from_millis(roll(span))
}
