//! Small helpers with no host state that every stage uses: a lock that
//! survives poisoning, text cut to a limit, and the schema helpers of the
//! CRDs the host generates ([`schema`]).
//!
//! They live at the bottom of the data flow so that no stage keeps its own
//! copy.

pub mod schema;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex` even when a panic elsewhere poisoned it.
///
/// # Guarantees
///
/// Never panics. Everything the host keeps behind a `Mutex` is replaced
/// whole (entries, counters, listeners), so a panic while the lock was held
/// cannot leave the value half-written: a poisoned lock still guards a valid
/// value, and the host keeps serving rather than cascading the panic.
///
/// # Examples
///
/// ```
/// use std::sync::Mutex;
/// let counter = Mutex::new(1);
/// *wasm_operator::util::lock(&counter) += 1;
/// assert_eq!(*wasm_operator::util::lock(&counter), 2);
/// ```
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `s` cut to at most `max` bytes, on a character boundary, with `…`
/// appended when it was cut (so the result may be up to `max + 3` bytes).
///
/// # Examples
///
/// ```
/// use wasm_operator::util::truncate;
/// assert_eq!(truncate("hello", 10), "hello");
/// assert_eq!(truncate("héllo", 2), "h…");
/// ```
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_a_char_boundary() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }

    #[test]
    fn a_poisoned_lock_still_gives_its_value() {
        let mutex = std::sync::Arc::new(Mutex::new(5));
        let poisoner = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 5);
    }
}
