//! Template text → [`Node`]s: splitting text from actions (with `{{-`/`-}}`
//! trimming and comments), tokenizing actions, and parsing control structures.

use serde_json::Value;

use super::{Binding, Node, Operand, Pipeline};
use crate::stages::lex;

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Text(String),
    Action(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    Var(String, Vec<String>),
    Ident(String),
    Lit(Value),
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
}

/// How a block ended.
enum Stop {
    End,
    Else(Vec<Tok>),
    Eof,
}

/// Parses a whole template.
pub(super) fn parse(text: &str) -> Result<Vec<Node>, String> {
    let segs = segments(text)?;
    let mut p = Parser { segs, pos: 0 };
    let (nodes, stop) = p.block()?;
    match stop {
        Stop::Eof => Ok(nodes),
        Stop::End => Err("unexpected {{end}}".into()),
        Stop::Else(_) => Err("unexpected {{else}}".into()),
    }
}

fn segments(text: &str) -> Result<Vec<Seg>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut before = &rest[..open];
        if trim_next {
            before = before.trim_start();
        }
        let after_open = &rest[open + 2..];
        let trim_prev = after_open.starts_with("- ")
            || after_open.starts_with("-\n")
            || after_open.starts_with("-\t");
        if trim_prev {
            before = before.trim_end();
        }
        if !before.is_empty() {
            out.push(Seg::Text(before.to_string()));
        }
        let close = after_open
            .find("}}")
            .ok_or_else(|| format!("unclosed action at byte {open}"))?;
        let mut inner = &after_open[..close];
        if trim_prev {
            inner = &inner[1..];
        }
        trim_next = inner.ends_with(" -") || inner.ends_with("\n-") || inner.ends_with("\t-");
        if trim_next {
            inner = &inner[..inner.len() - 1];
        }
        let inner = inner.trim();
        if !(inner.starts_with("/*") && inner.ends_with("*/")) {
            out.push(Seg::Action(inner.to_string()));
        }
        rest = &after_open[close + 2..];
    }
    let last = if trim_next { rest.trim_start() } else { rest };
    if !last.is_empty() {
        out.push(Seg::Text(last.to_string()));
    }
    Ok(out)
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads `.a.b.c` field names starting at a `.` at `chars[i]`; returns them and the index after.
fn field_chain(chars: &[char], mut i: usize) -> (Vec<String>, usize) {
    let mut fields = Vec::new();
    while i < chars.len() && chars[i] == '.' && chars.get(i + 1).is_some_and(|c| is_ident_char(*c))
    {
        i += 1;
        let start = i;
        while i < chars.len() && is_ident_char(chars[i]) {
            i += 1;
        }
        fields.push(chars[start..i].iter().collect());
    }
    (fields, i)
}

fn tokenize(action: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = action.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            c if c.is_whitespace() => i += 1,
            '.' => {
                let (fields, end) = field_chain(&chars, i);
                toks.push(Tok::Field(fields));
                i = if end == i { i + 1 } else { end };
            }
            '$' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let (fields, end) = field_chain(&chars, i);
                i = end;
                toks.push(Tok::Var(name, fields));
            }
            '"' => {
                let (text, end) = lex::string_literal(&chars, i)
                    .map_err(|e| format!("{e} in {{{{{action}}}}}"))?;
                toks.push(Tok::Lit(Value::String(text)));
                i = end;
            }
            '`' => {
                let start = i + 1;
                let len = chars[start..]
                    .iter()
                    .position(|c| *c == '`')
                    .ok_or_else(|| format!("unterminated raw string in {{{{{action}}}}}"))?;
                toks.push(Tok::Lit(Value::String(
                    chars[start..start + len].iter().collect(),
                )));
                i = start + len + 1;
            }
            _ if lex::starts_number(&chars, i) => {
                let (text, end) = lex::number(&chars, i);
                i = end;
                let value = match text.parse::<i64>() {
                    Ok(n) => Value::from(n),
                    Err(_) => text
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(Value::Number)
                        .ok_or_else(|| format!("bad number {text} in {{{{{action}}}}}"))?,
                };
                toks.push(Tok::Lit(value));
            }
            c if is_ident_char(c) => {
                let start = i;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                toks.push(match word.as_str() {
                    "true" => Tok::Lit(Value::Bool(true)),
                    "false" => Tok::Lit(Value::Bool(false)),
                    "nil" => Tok::Lit(Value::Null),
                    _ => Tok::Ident(word),
                });
            }
            ':' if next == Some('=') => {
                toks.push(Tok::Declare);
                i += 2;
            }
            '=' => {
                toks.push(Tok::Assign);
                i += 1;
            }
            ',' | '(' | ')' | '|' => {
                toks.push(match c {
                    ',' => Tok::Comma,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    _ => Tok::Pipe,
                });
                i += 1;
            }
            other => {
                return Err(format!(
                    "unsupported character {other:?} in {{{{{action}}}}}"
                ));
            }
        }
    }
    Ok(toks)
}

struct Parser {
    segs: Vec<Seg>,
    pos: usize,
}

impl Parser {
    /// Nodes up to `{{end}}`, `{{else …}}` or the end of the text.
    fn block(&mut self) -> Result<(Vec<Node>, Stop), String> {
        let mut nodes = Vec::new();
        while self.pos < self.segs.len() {
            let seg = self.segs[self.pos].clone();
            self.pos += 1;
            let action = match seg {
                Seg::Text(t) => {
                    nodes.push(Node::Text(t));
                    continue;
                }
                Seg::Action(a) => a,
            };
            let toks = tokenize(&action)?;
            let (head, rest) = match toks.split_first() {
                Some((Tok::Ident(word), rest)) => (word.as_str(), rest),
                _ => {
                    nodes.push(Node::Output(pipeline(&toks)?));
                    continue;
                }
            };
            match head {
                "end" => return Ok((nodes, Stop::End)),
                "else" => return Ok((nodes, Stop::Else(rest.to_vec()))),
                "if" | "with" | "range" => nodes.push(self.control(head, rest)?),
                _ => nodes.push(Node::Output(pipeline(&toks)?)),
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// `if`, `with` or `range` whose pipeline tokens are `toks`, up to its `{{end}}`.
    fn control(&mut self, keyword: &str, toks: &[Tok]) -> Result<Node, String> {
        let pipe = pipeline(toks)?;
        let (then, stop) = self.block()?;
        let otherwise = match stop {
            Stop::End => Vec::new(),
            Stop::Eof => return Err(format!("{{{{{keyword}}}}} without {{{{end}}}}")),
            Stop::Else(rest) if rest.is_empty() => {
                let (otherwise, stop) = self.block()?;
                if !matches!(stop, Stop::End) {
                    return Err(format!(
                        "{{{{else}}}} of {{{{{keyword}}}}} without {{{{end}}}}"
                    ));
                }
                otherwise
            }
            Stop::Else(rest) => match rest.split_first() {
                Some((Tok::Ident(word), inner)) if word == "if" || word == "with" => {
                    vec![self.control(word, inner)?]
                }
                _ => return Err(format!("unsupported {{{{else …}}}} in {{{{{keyword}}}}}")),
            },
        };
        Ok(match keyword {
            "if" => Node::If {
                pipe,
                then,
                otherwise,
            },
            "with" => Node::With {
                pipe,
                then,
                otherwise,
            },
            _ => Node::Range {
                pipe,
                body: then,
                otherwise,
            },
        })
    }
}

/// `$a, $b := cmd | cmd` from its tokens.
fn pipeline(toks: &[Tok]) -> Result<Pipeline, String> {
    let (vars, binding, rest) = match toks {
        [
            Tok::Var(a, fa),
            Tok::Comma,
            Tok::Var(b, fb),
            Tok::Declare,
            rest @ ..,
        ] if fa.is_empty() && fb.is_empty() => (vec![a.clone(), b.clone()], Binding::Declare, rest),
        [Tok::Var(a, fa), Tok::Declare, rest @ ..] if fa.is_empty() => {
            (vec![a.clone()], Binding::Declare, rest)
        }
        [Tok::Var(a, fa), Tok::Assign, rest @ ..] if fa.is_empty() => {
            (vec![a.clone()], Binding::Assign, rest)
        }
        _ => (Vec::new(), Binding::None, toks),
    };
    let mut cmds = Vec::new();
    let mut i = 0;
    let mut cmd = Vec::new();
    while i < rest.len() {
        match &rest[i] {
            Tok::Pipe => {
                cmds.push(std::mem::take(&mut cmd));
                i += 1;
            }
            Tok::LParen => {
                let close = matching_paren(rest, i)?;
                cmd.push(Operand::Paren(Box::new(pipeline(&rest[i + 1..close])?)));
                i = close + 1;
            }
            Tok::Field(f) => {
                cmd.push(Operand::Dot(f.clone()));
                i += 1;
            }
            Tok::Var(name, f) => {
                cmd.push(Operand::Var(name.clone(), f.clone()));
                i += 1;
            }
            Tok::Ident(name) => {
                cmd.push(Operand::Func(name.clone()));
                i += 1;
            }
            Tok::Lit(v) => {
                cmd.push(Operand::Lit(v.clone()));
                i += 1;
            }
            other => return Err(format!("unexpected {other:?} in a pipeline")),
        }
    }
    cmds.push(cmd);
    if cmds.iter().any(Vec::is_empty) {
        return Err("empty command in a pipeline".into());
    }
    Ok(Pipeline {
        vars,
        binding,
        cmds,
    })
}

fn matching_paren(toks: &[Tok], open: usize) -> Result<usize, String> {
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::LParen => depth += 1,
            Tok::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err("unbalanced parentheses".into())
}
