//! Lexing shared by the two small languages of kwok's stages: the jq subset
//! of selectors ([`super::query`]) and the Go-template subset of status
//! templates ([`super::template`]). Both read JSON string literals and
//! numbers the same way; their tokens differ, so each keeps its own tokenizer.

/// A JSON string literal starting at `chars[start] == '"'`: the string and
/// the index after its closing quote.
///
/// # Errors
/// An unterminated literal, or one JSON cannot read (a bad escape), with the
/// position it starts at.
pub fn string_literal(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    if i >= chars.len() {
        return Err(format!("unterminated string at {start}"));
    }
    let raw: String = chars[start..=i].iter().collect();
    let s = serde_json::from_str(&raw).map_err(|e| format!("bad string {raw}: {e}"))?;
    Ok((s, i + 1))
}

/// Whether a number starts at `chars[i]`: a digit, or `-` before a digit.
pub fn starts_number(chars: &[char], i: usize) -> bool {
    let next = chars.get(i + 1).copied();
    chars[i].is_ascii_digit() || (chars[i] == '-' && next.is_some_and(|n| n.is_ascii_digit()))
}

/// The text of the number starting at `chars[start]` (see [`starts_number`])
/// and the index after it; digits and dots, parsed by the caller.
pub fn number(chars: &[char], start: usize) -> (String, usize) {
    let mut i = start + 1;
    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
        i += 1;
    }
    (chars[start..i].iter().collect(), i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn strings_are_json_strings() {
        let c = chars(r#""a\"b" rest"#);
        assert_eq!(string_literal(&c, 0), Ok((r#"a"b"#.to_string(), 6)));
        assert!(string_literal(&chars(r#""open"#), 0).is_err());
    }

    #[test]
    fn numbers_are_digits_and_dots_with_an_optional_sign() {
        let c = chars("-12.5)");
        assert!(starts_number(&c, 0));
        assert_eq!(number(&c, 0), ("-12.5".to_string(), 5));
        assert!(!starts_number(&chars("-x"), 0));
    }
}
