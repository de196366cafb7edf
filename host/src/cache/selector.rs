//! Kubernetes label selectors in their string form (`app=web,tier in (a,b)`),
//! evaluated against cached objects so plugin `list` calls never hit the API.
//!
//! Parsed as the API server parses them (apimachinery's `labels.Parse`): a
//! lexer of identifiers and operators, then `[!]key [op value(s)]`
//! requirements separated by commas. Keys must be qualified names
//! (`[prefix/]name`) and values valid label values, so `!!`, `a=b=c`,
//! `in ()` and bad keys are errors, never silently read as something else.

use std::collections::BTreeMap;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; all requirements must hold (logical AND).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {problem}")]
pub struct SelectorError {
    selector: String,
    problem: String,
}

/// A token of the selector language, as apimachinery's lexer cuts them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Identifier(s) => format!("{s:?}"),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::Not => "'!'".into(),
            Token::Equals => "'='".into(),
            Token::DoubleEquals => "'=='".into(),
            Token::NotEquals => "'!='".into(),
            Token::GreaterThan => "'>'".into(),
            Token::LessThan => "'<'".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

fn lex(s: &str) -> Vec<Token> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (token, len) = match (c, next) {
            ('!', Some('=')) => (Token::NotEquals, 2),
            ('=', Some('=')) => (Token::DoubleEquals, 2),
            ('!', _) => (Token::Not, 1),
            ('=', _) => (Token::Equals, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            ('>', _) => (Token::GreaterThan, 1),
            ('<', _) => (Token::LessThan, 1),
            _ => {
                let start = i;
                let mut end = i;
                while end < chars.len() && !chars[end].is_whitespace() && !is_special(chars[end]) {
                    end += 1;
                }
                let word: String = chars[start..end].iter().collect();
                let token = match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Identifier(word),
                };
                (token, end - start)
            }
        };
        tokens.push(token);
        i += len;
    }
    tokens
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters: a
/// label name, and (or empty) a label value.
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: the optional prefix of a label key.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Why `key` is not a label key (`[prefix/]name`), if it is not.
fn key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Some(format!(
            "label key {key:?}: the prefix {prefix:?} is not a DNS subdomain"
        ));
    }
    (!is_label_name(name)).then(|| {
        format!(
            "label key {key:?}: the name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    })
}

/// Why `value` is not a label value, if it is not.
fn value_problem(value: &str) -> Option<String> {
    (!value.is_empty() && !is_label_name(value)).then(|| {
        format!(
            "label value {value:?}: must be empty or 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    })
}

/// A recursive-descent parser over the lexed tokens.
struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn found(token: Option<&Token>) -> String {
        token.map_or_else(|| "the end".to_string(), Token::describe)
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Identifier(key)) => match key_problem(&key) {
                Some(problem) => Err(problem),
                None => Ok(key),
            },
            other => Err(format!(
                "expected a label key, found {}",
                Self::found(other.as_ref())
            )),
        }
    }

    /// A value after `=`, `==` or `!=`: an identifier, or empty before a
    /// comma or the end (`a=` selects `a` set to "").
    fn value(&mut self) -> Result<String, String> {
        let value = match self.peek() {
            None | Some(Token::Comma) => String::new(),
            Some(Token::Identifier(_)) => match self.next() {
                Some(Token::Identifier(v)) => v,
                _ => String::new(),
            },
            other => {
                return Err(format!(
                    "expected a label value, found {}",
                    Self::found(other)
                ));
            }
        };
        match value_problem(&value) {
            Some(problem) => Err(problem),
            None => Ok(value),
        }
    }

    /// `( v1, v2, ... )`, not empty.
    fn values(&mut self, op: &str) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "expected '(' after '{op}', found {}",
                    Self::found(other.as_ref())
                ));
            }
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Token::Identifier(v)) => {
                    if let Some(problem) = value_problem(&v) {
                        return Err(problem);
                    }
                    values.push(v);
                    match self.next() {
                        Some(Token::Comma) => {}
                        Some(Token::Close) => break,
                        other => {
                            return Err(format!(
                                "expected ',' or ')' in the values of '{op}', found {}",
                                Self::found(other.as_ref())
                            ));
                        }
                    }
                }
                Some(Token::Close) if values.is_empty() => {
                    return Err(format!("the values of '{op}' cannot be empty"));
                }
                other => {
                    return Err(format!(
                        "expected a value in the values of '{op}', found {}",
                        Self::found(other.as_ref())
                    ));
                }
            }
        }
        Ok(values)
    }

    fn integer(&mut self, op: &str) -> Result<i64, String> {
        match self.next() {
            Some(Token::Identifier(v)) => v
                .parse()
                .map_err(|_| format!("'{op}' needs an integer, found {v:?}")),
            other => Err(format!(
                "'{op}' needs an integer, found {}",
                Self::found(other.as_ref())
            )),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Token::Not) {
            self.next();
            return Ok(Requirement::NotExists(self.key()?));
        }
        let key = self.key()?;
        let requirement = match self.peek() {
            None | Some(Token::Comma) => return Ok(Requirement::Exists(key)),
            Some(Token::Equals | Token::DoubleEquals) => {
                self.next();
                Requirement::Equals(key, self.value()?)
            }
            Some(Token::NotEquals) => {
                self.next();
                Requirement::NotEquals(key, self.value()?)
            }
            Some(Token::In) => {
                self.next();
                Requirement::In(key, self.values("in")?)
            }
            Some(Token::NotIn) => {
                self.next();
                Requirement::NotIn(key, self.values("notin")?)
            }
            Some(Token::GreaterThan) => {
                self.next();
                Requirement::GreaterThan(key, self.integer(">")?)
            }
            Some(Token::LessThan) => {
                self.next();
                Requirement::LessThan(key, self.integer("<")?)
            }
            other => {
                return Err(format!(
                    "expected an operator (=, ==, !=, in, notin, >, <), ',' or the end after {key:?}, found {}",
                    Self::found(other)
                ));
            }
        };
        Ok(requirement)
    }
}

impl LabelSelector {
    /// Parses the string form used by `kubectl -l` and the list API, with
    /// the API server's rules; the empty string selects everything.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] naming the selector and the first problem (an
    /// unexpected token, an invalid key or value, an empty set).
    pub fn parse(selector: &str) -> Result<LabelSelector, SelectorError> {
        let err = |problem: String| SelectorError {
            selector: selector.to_string(),
            problem,
        };
        let mut parser = Parser {
            tokens: lex(selector),
            at: 0,
        };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(LabelSelector::default());
        }
        loop {
            requirements.push(parser.requirement().map_err(err)?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {
                    if parser.peek().is_none() {
                        return Err(err("a requirement must follow ','".into()));
                    }
                }
                Some(other) => {
                    return Err(err(format!(
                        "expected ',' or the end, found {}",
                        other.describe()
                    )));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let number = |k: &String| labels.get(k).and_then(|v| v.parse::<i64>().ok());
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::GreaterThan(k, n) => number(k).is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => number(k).is_some_and(|v| v < *n),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_sets() {
        let s = LabelSelector::parse("app=web,tier in (a, b),!legacy,env!=prod").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("env", "prod")])));
    }

    #[test]
    fn exists_and_notin() {
        let s = LabelSelector::parse("app,tier notin (x)").unwrap();
        assert!(s.matches(&labels(&[("app", "1")])));
        assert!(!s.matches(&labels(&[("app", "1"), ("tier", "x")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn whitespace_double_equals_prefixes_and_empty_values_parse_like_the_api_server() {
        let s = LabelSelector::parse(" app.kubernetes.io/name == web , ! legacy , note= ").unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "web"), ("note", "")])));
        assert!(!s.matches(&labels(&[("app.kubernetes.io/name", "web"), ("note", "x")])));
        let n = LabelSelector::parse("replicas>2,replicas<5").unwrap();
        assert!(n.matches(&labels(&[("replicas", "3")])));
        assert!(!n.matches(&labels(&[("replicas", "7")])));
        assert!(!n.matches(&labels(&[("replicas", "many")])));
    }

    #[test]
    fn refuses_what_the_api_server_refuses() {
        for bad in [
            "!!",
            "!!a",
            "a=b=c",
            "a==b==c",
            "app in x",
            "app in ()",
            "app in (a b)",
            "app in (a,",
            "=x",
            "a,,b",
            "a,",
            "a b",
            "-bad=x",
            "a=-bad",
            "Upper.Case/x=y",
            "a/b/c=d",
            "tier notin",
            "a>b",
            "a=(b)",
            &format!("{}=x", "k".repeat(64)),
            &format!("a={}", "v".repeat(64)),
        ] {
            let error = LabelSelector::parse(bad)
                .expect_err(&format!("{bad:?} must not parse"))
                .to_string();
            assert!(error.contains("invalid label selector"), "{error}");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let error = LabelSelector::parse("a=b=c").unwrap_err().to_string();
        assert!(error.contains("'='"), "{error}");
        let error = LabelSelector::parse("!!").unwrap_err().to_string();
        assert!(error.contains("expected a label key"), "{error}");
    }

    #[test]
    fn empty_selects_all() {
        assert!(LabelSelector::parse("").unwrap().matches(&labels(&[])));
        assert!(LabelSelector::parse("  ").unwrap().matches(&labels(&[])));
    }
}
