//! The jq subset kwok's selectors and `*From` expressions use, evaluated on
//! JSON: paths (`.a.b`, `.a["k"]`, `.a.[]`, `.a[]`, `.a[0]`), pipes, `select(…)`,
//! comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`), `and`, `or`, `not`, the
//! alternative operator `//`, addition `+`, the date functions `fromdate`
//! and `todate` (with their `…iso8601` names), parentheses and literals.
//!
//! Guarantees: results follow jq's (a stream of values; `.field` of `null` is
//! `null`; iterating or indexing a value of the wrong type is an error), and
//! [`Query::execute`] answers as kwok's `expression.Query.Execute` does: an
//! error yields no values, and `null` results are dropped.

use std::cmp::Ordering;

use serde_json::Value;

use super::lex;

/// A jq expression this subset cannot parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("jq expression {expression:?}: {message}")]
pub struct QueryError {
    /// The expression as written.
    pub expression: String,
    /// What is wrong, at which position.
    pub message: String,
}

/// A parsed jq expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    source: String,
    expr: Expr,
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Identity,
    Literal(Value),
    Field(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Iterate(Box<Expr>),
    Pipe(Box<Expr>, Box<Expr>),
    Alt(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Box<Expr>, CmpOp, Box<Expr>),
    Add(Box<Expr>, Box<Expr>),
    Select(Box<Expr>),
    Not,
    FromDate,
    ToDate,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Dot,
    LBracket,
    RBracket,
    LParen,
    RParen,
    Pipe,
    Alt,
    Plus,
    Cmp(CmpOp),
    Str(String),
    Num(f64),
    Ident(String),
}

/// Why evaluation stopped (jq's runtime errors).
#[derive(Debug)]
struct EvalError;

impl Query {
    /// Parses `source`.
    ///
    /// # Errors
    /// [`QueryError`] when the expression is not in the supported subset.
    pub fn parse(source: &str) -> Result<Query, QueryError> {
        let err = |message: String| QueryError {
            expression: source.to_string(),
            message,
        };
        let toks = tokenize(source).map_err(err)?;
        let mut p = Parser { toks, pos: 0 };
        let expr = p.pipe().map_err(err)?;
        if p.pos != p.toks.len() {
            return Err(err(format!("unexpected {:?}", p.toks[p.pos])));
        }
        Ok(Query {
            source: source.to_string(),
            expr,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The non-null values the expression yields on `input`; none on a runtime error.
    pub fn execute(&self, input: &Value) -> Vec<Value> {
        match eval(&self.expr, input) {
            Ok(values) => values.into_iter().filter(|v| !v.is_null()).collect(),
            Err(EvalError) => Vec::new(),
        }
    }
}

fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if let Some(tok) = punctuation(c) {
            toks.push(tok);
            i += 1;
            continue;
        }
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '/' if next == Some('/') => {
                toks.push(Tok::Alt);
                i += 2;
            }
            '=' | '!' if next == Some('=') => {
                toks.push(Tok::Cmp(if c == '=' { CmpOp::Eq } else { CmpOp::Ne }));
                i += 2;
            }
            '<' | '>' => {
                let or_equal = next == Some('=');
                toks.push(Tok::Cmp(match (c, or_equal) {
                    ('<', false) => CmpOp::Lt,
                    ('<', true) => CmpOp::Le,
                    (_, false) => CmpOp::Gt,
                    (_, true) => CmpOp::Ge,
                }));
                i += if or_equal { 2 } else { 1 };
            }
            '"' => {
                let (s, end) = lex::string_literal(&chars, i)?;
                toks.push(Tok::Str(s));
                i = end;
            }
            _ if lex::starts_number(&chars, i) => {
                let start = i;
                let (text, end) = lex::number(&chars, i);
                i = end;
                let n = text
                    .parse::<f64>()
                    .map_err(|_| format!("bad number {text:?} at {start}"))?;
                toks.push(Tok::Num(n));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                toks.push(Tok::Ident(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unsupported character {other:?} at {i}")),
        }
    }
    Ok(toks)
}

/// The one-character tokens.
fn punctuation(c: char) -> Option<Tok> {
    Some(match c {
        '.' => Tok::Dot,
        '[' => Tok::LBracket,
        ']' => Tok::RBracket,
        '(' => Tok::LParen,
        ')' => Tok::RParen,
        '|' => Tok::Pipe,
        '+' => Tok::Plus,
        _ => return None,
    })
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Tok) -> Result<(), String> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(format!("expected {t:?} at token {}", self.pos))
        }
    }

    fn eat_ident(&mut self, word: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(w)) if w == word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn pipe(&mut self) -> Result<Expr, String> {
        let mut left = self.alt()?;
        while self.eat(&Tok::Pipe) {
            let right = self.alt()?;
            left = Expr::Pipe(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn alt(&mut self) -> Result<Expr, String> {
        let mut left = self.or()?;
        while self.eat(&Tok::Alt) {
            let right = self.or()?;
            left = Expr::Alt(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat_ident("or") {
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.compare()?;
        while self.eat_ident("and") {
            let right = self.compare()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn compare(&mut self) -> Result<Expr, String> {
        let left = self.additive()?;
        if let Some(Tok::Cmp(op)) = self.peek().cloned() {
            self.pos += 1;
            let right = self.additive()?;
            return Ok(Expr::Compare(Box::new(left), op, Box::new(right)));
        }
        Ok(left)
    }

    /// `a + b + …`, binding tighter than comparisons, as in jq.
    fn additive(&mut self) -> Result<Expr, String> {
        let mut left = self.postfix()?;
        while self.eat(&Tok::Plus) {
            let right = self.postfix()?;
            left = Expr::Add(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn postfix(&mut self) -> Result<Expr, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(&Tok::Dot) {
                e = match self.peek().cloned() {
                    Some(Tok::Ident(name)) => {
                        self.pos += 1;
                        Expr::Field(Box::new(e), name)
                    }
                    Some(Tok::Str(name)) => {
                        self.pos += 1;
                        Expr::Field(Box::new(e), name)
                    }
                    Some(Tok::LBracket) => self.bracket(e)?,
                    other => return Err(format!("unexpected {other:?} after '.'")),
                };
            } else if self.peek() == Some(&Tok::LBracket) {
                e = self.bracket(e)?;
            } else {
                return Ok(e);
            }
        }
    }

    /// `[]`, `["key"]` or `[n]` applied to `e`, at a `[` token.
    fn bracket(&mut self, e: Expr) -> Result<Expr, String> {
        self.expect(&Tok::LBracket)?;
        if self.eat(&Tok::RBracket) {
            return Ok(Expr::Iterate(Box::new(e)));
        }
        let index = self.pipe()?;
        self.expect(&Tok::RBracket)?;
        Ok(Expr::Index(Box::new(e), Box::new(index)))
    }

    fn primary(&mut self) -> Result<Expr, String> {
        match self.peek().cloned() {
            Some(Tok::Dot) => {
                self.pos += 1;
                match self.peek().cloned() {
                    Some(Tok::Ident(name)) | Some(Tok::Str(name)) => {
                        self.pos += 1;
                        Ok(Expr::Field(Box::new(Expr::Identity), name))
                    }
                    Some(Tok::LBracket) => self.bracket(Expr::Identity),
                    _ => Ok(Expr::Identity),
                }
            }
            Some(Tok::Str(s)) => {
                self.pos += 1;
                Ok(Expr::Literal(Value::String(s)))
            }
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok(Expr::Literal(number(n)))
            }
            Some(Tok::LParen) => {
                self.pos += 1;
                let e = self.pipe()?;
                self.expect(&Tok::RParen)?;
                Ok(e)
            }
            Some(Tok::Ident(word)) => {
                self.pos += 1;
                match word.as_str() {
                    "true" => Ok(Expr::Literal(Value::Bool(true))),
                    "false" => Ok(Expr::Literal(Value::Bool(false))),
                    "null" => Ok(Expr::Literal(Value::Null)),
                    "not" => Ok(Expr::Not),
                    "fromdate" | "fromdateiso8601" => Ok(Expr::FromDate),
                    "todate" | "todateiso8601" => Ok(Expr::ToDate),
                    "select" => {
                        self.expect(&Tok::LParen)?;
                        let cond = self.pipe()?;
                        self.expect(&Tok::RParen)?;
                        Ok(Expr::Select(Box::new(cond)))
                    }
                    other => Err(format!("unsupported function {other:?}")),
                }
            }
            other => Err(format!("unexpected {other:?}")),
        }
    }
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// jq truthiness: everything but `false` and `null`.
fn truthy(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false))
}

fn eval(e: &Expr, input: &Value) -> Result<Vec<Value>, EvalError> {
    Ok(match e {
        Expr::Identity => vec![input.clone()],
        Expr::Literal(v) => vec![v.clone()],
        Expr::Field(base, name) => {
            let mut out = Vec::new();
            for v in eval(base, input)? {
                out.push(match v {
                    Value::Null => Value::Null,
                    Value::Object(m) => m.get(name).cloned().unwrap_or(Value::Null),
                    _ => return Err(EvalError),
                });
            }
            out
        }
        Expr::Index(base, index) => {
            let mut out = Vec::new();
            for v in eval(base, input)? {
                for k in eval(index, input)? {
                    out.push(index_value(&v, &k)?);
                }
            }
            out
        }
        Expr::Iterate(base) => {
            let mut out = Vec::new();
            for v in eval(base, input)? {
                match v {
                    Value::Array(a) => out.extend(a),
                    Value::Object(m) => out.extend(m.into_iter().map(|(_, v)| v)),
                    _ => return Err(EvalError),
                }
            }
            out
        }
        Expr::Pipe(left, right) => {
            let mut out = Vec::new();
            for v in eval(left, input)? {
                out.extend(eval(right, &v)?);
            }
            out
        }
        Expr::Alt(left, right) => {
            let left: Vec<Value> = eval(left, input)
                .unwrap_or_default()
                .into_iter()
                .filter(truthy)
                .collect();
            if left.is_empty() {
                eval(right, input)?
            } else {
                left
            }
        }
        Expr::And(l, r) | Expr::Or(l, r) => {
            let is_and = matches!(e, Expr::And(..));
            let mut out = Vec::new();
            for lv in eval(l, input)? {
                if truthy(&lv) != is_and {
                    out.push(Value::Bool(!is_and));
                    continue;
                }
                for rv in eval(r, input)? {
                    out.push(Value::Bool(truthy(&rv)));
                }
            }
            out
        }
        Expr::Compare(l, op, r) => {
            let mut out = Vec::new();
            for rv in eval(r, input)? {
                for lv in eval(l, input)? {
                    let ord = compare(&lv, &rv);
                    out.push(Value::Bool(match op {
                        CmpOp::Eq => ord == Ordering::Equal,
                        CmpOp::Ne => ord != Ordering::Equal,
                        CmpOp::Lt => ord == Ordering::Less,
                        CmpOp::Le => ord != Ordering::Greater,
                        CmpOp::Gt => ord == Ordering::Greater,
                        CmpOp::Ge => ord != Ordering::Less,
                    }));
                }
            }
            out
        }
        Expr::Add(l, r) => {
            let mut out = Vec::new();
            for rv in eval(r, input)? {
                for lv in eval(l, input)? {
                    out.push(add(&lv, &rv)?);
                }
            }
            out
        }
        Expr::FromDate => vec![from_date(input)?],
        Expr::ToDate => vec![to_date(input)?],
        Expr::Select(cond) => {
            if eval(cond, input)?.iter().any(truthy) {
                vec![input.clone()]
            } else {
                Vec::new()
            }
        }
        Expr::Not => vec![Value::Bool(!truthy(input))],
    })
}

/// jq's `+`: `null` is the identity, numbers add, strings and arrays
/// concatenate, objects merge (the right one's keys win); others are an error.
fn add(a: &Value, b: &Value) -> Result<Value, EvalError> {
    Ok(match (a, b) {
        (Value::Null, v) | (v, Value::Null) => v.clone(),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x
                .checked_add(y)
                .map_or_else(|| number(x as f64 + y as f64), Value::from),
            _ => number(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
        },
        (Value::String(x), Value::String(y)) => Value::String(format!("{x}{y}")),
        (Value::Array(x), Value::Array(y)) => Value::Array(x.iter().chain(y).cloned().collect()),
        (Value::Object(x), Value::Object(y)) => {
            let mut m = x.clone();
            m.extend(y.iter().map(|(k, v)| (k.clone(), v.clone())));
            Value::Object(m)
        }
        _ => return Err(EvalError),
    })
}

/// jq's `fromdate`: an ISO 8601 time (`2026-01-02T03:04:05Z`) as seconds
/// since the epoch. Unlike gojq (`strptime("%Y-%m-%dT%H:%M:%S%z")`) it also
/// reads a fractional second (`…05.5Z` → 1767323045.5) and any RFC 3339
/// offset: the devcluster's `Now`, hence the times its stages write, carry
/// nanoseconds.
fn from_date(v: &Value) -> Result<Value, EvalError> {
    let t = chrono::DateTime::parse_from_rfc3339(v.as_str().ok_or(EvalError)?)
        .map_err(|_| EvalError)?;
    let nanos = t.timestamp_subsec_nanos();
    Ok(if nanos == 0 {
        Value::from(t.timestamp())
    } else {
        number(t.timestamp() as f64 + f64::from(nanos) / 1e9)
    })
}

/// jq's `todate`: seconds since the epoch as `%Y-%m-%dT%H:%M:%SZ` (the
/// fraction of a second dropped).
fn to_date(v: &Value) -> Result<Value, EvalError> {
    let secs = v.as_f64().ok_or(EvalError)?.floor() as i64;
    let t = chrono::DateTime::from_timestamp(secs, 0).ok_or(EvalError)?;
    Ok(Value::String(t.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn index_value(v: &Value, k: &Value) -> Result<Value, EvalError> {
    match (v, k) {
        (Value::Null, _) => Ok(Value::Null),
        (Value::Object(m), Value::String(s)) => Ok(m.get(s).cloned().unwrap_or(Value::Null)),
        (Value::Array(a), Value::Number(n)) => {
            let i = n.as_i64().ok_or(EvalError)?;
            let i = if i < 0 { a.len() as i64 + i } else { i };
            Ok(usize::try_from(i)
                .ok()
                .and_then(|i| a.get(i).cloned())
                .unwrap_or(Value::Null))
        }
        _ => Err(EvalError),
    }
}

/// jq's total order: null < false < true < numbers < strings < arrays < objects.
fn compare(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(false) => 1,
            Value::Bool(true) => 2,
            Value::Number(_) => 3,
            Value::String(_) => 4,
            Value::Array(_) => 5,
            Value::Object(_) => 6,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(a, b)| compare(a, b))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(x.len().cmp(&y.len())),
        (Value::Object(_), Value::Object(_)) => {
            if a == b {
                Ordering::Equal
            } else {
                a.to_string().cmp(&b.to_string())
            }
        }
        _ => rank(a).cmp(&rank(b)),
    }
}
