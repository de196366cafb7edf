//! Executes parsed [`Node`]s on JSON data, with Go `text/template` semantics:
//! missing fields are "no value" (falsy, printed `<no value>`), truthiness is
//! Go's (false, 0, nil and empty strings, lists and maps are false), variables
//! are scoped to the control structure that declares them.

use serde_json::Value;

use super::{Binding, Funcs, Node, Operand, Pipeline, truthy};

struct Exec<'a> {
    root: &'a Value,
    vars: Vec<(String, Value)>,
    funcs: &'a dyn Funcs,
    out: String,
}

/// Renders `nodes` with `data` as the dot.
pub(super) fn render(nodes: &[Node], data: &Value, funcs: &dyn Funcs) -> Result<String, String> {
    let mut exec = Exec {
        root: data,
        vars: Vec::new(),
        funcs,
        out: String::new(),
    };
    exec.nodes(nodes, data)?;
    Ok(exec.out)
}

/// How Go prints a value with `{{ . }}`.
fn print(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(print).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", print(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

fn fields(mut v: Value, names: &[String]) -> Value {
    for name in names {
        v = match v {
            Value::Object(mut m) => m.remove(name).unwrap_or(Value::Null),
            _ => Value::Null,
        };
    }
    v
}

impl Exec<'_> {
    fn nodes(&mut self, nodes: &[Node], dot: &Value) -> Result<(), String> {
        for node in nodes {
            self.node(node, dot)?;
        }
        Ok(())
    }

    fn node(&mut self, node: &Node, dot: &Value) -> Result<(), String> {
        match node {
            Node::Text(t) => self.out.push_str(t),
            Node::Output(p) => {
                let v = self.pipeline(p, dot)?;
                if p.binding == Binding::None {
                    self.out.push_str(&print(&v));
                }
            }
            Node::If {
                pipe,
                then,
                otherwise,
            } => {
                let mark = self.vars.len();
                let v = self.pipeline(pipe, dot)?;
                let branch = if truthy(&v) { then } else { otherwise };
                self.nodes(branch, dot)?;
                self.vars.truncate(mark);
            }
            Node::With {
                pipe,
                then,
                otherwise,
            } => {
                let mark = self.vars.len();
                let v = self.pipeline(pipe, dot)?;
                if truthy(&v) {
                    self.nodes(then, &v)?;
                } else {
                    self.nodes(otherwise, dot)?;
                }
                self.vars.truncate(mark);
            }
            Node::Range {
                pipe,
                body,
                otherwise,
            } => self.range(pipe, body, otherwise, dot)?,
        }
        Ok(())
    }

    fn range(
        &mut self,
        pipe: &Pipeline,
        body: &[Node],
        otherwise: &[Node],
        dot: &Value,
    ) -> Result<(), String> {
        let bare = Pipeline {
            vars: Vec::new(),
            binding: Binding::None,
            cmds: pipe.cmds.clone(),
        };
        let v = self.pipeline(&bare, dot)?;
        let items: Vec<(Value, Value)> = match v {
            Value::Array(a) => a
                .into_iter()
                .enumerate()
                .map(|(i, e)| (Value::from(i), e))
                .collect(),
            Value::Object(m) => m.into_iter().map(|(k, e)| (Value::String(k), e)).collect(),
            Value::Null => Vec::new(),
            Value::Number(n) => (0..n.as_i64().unwrap_or(0))
                .map(|i| (Value::from(i), Value::from(i)))
                .collect(),
            other => return Err(format!("range can't iterate over {}", print(&other))),
        };
        if items.is_empty() {
            return self.nodes(otherwise, dot);
        }
        for (key, elem) in items {
            let mark = self.vars.len();
            match pipe.vars.as_slice() {
                [e] => self.vars.push((e.clone(), elem.clone())),
                [k, e] => {
                    self.vars.push((k.clone(), key));
                    self.vars.push((e.clone(), elem.clone()));
                }
                _ => {}
            }
            self.nodes(body, &elem)?;
            self.vars.truncate(mark);
        }
        Ok(())
    }

    fn pipeline(&mut self, p: &Pipeline, dot: &Value) -> Result<Value, String> {
        let mut prev: Option<Value> = None;
        for cmd in &p.cmds {
            prev = Some(self.command(cmd, dot, prev)?);
        }
        let v = prev.unwrap_or(Value::Null);
        match p.binding {
            Binding::None => {}
            Binding::Declare => {
                for name in &p.vars {
                    self.vars.push((name.clone(), v.clone()));
                }
            }
            Binding::Assign => {
                for name in &p.vars {
                    let slot = self
                        .vars
                        .iter_mut()
                        .rev()
                        .find(|(n, _)| n == name)
                        .ok_or_else(|| format!("undefined variable ${name}"))?;
                    slot.1 = v.clone();
                }
            }
        }
        Ok(v)
    }

    fn command(
        &mut self,
        cmd: &[Operand],
        dot: &Value,
        prev: Option<Value>,
    ) -> Result<Value, String> {
        if let Some(Operand::Func(name)) = cmd.first() {
            let mut args = Vec::with_capacity(cmd.len());
            for a in &cmd[1..] {
                args.push(self.operand(a, dot)?);
            }
            args.extend(prev);
            return self.funcs.call(name, args);
        }
        match (cmd, prev) {
            ([single], None) => self.operand(single, dot),
            _ => Err("a value cannot take arguments (is a function name misspelled?)".into()),
        }
    }

    fn operand(&mut self, op: &Operand, dot: &Value) -> Result<Value, String> {
        Ok(match op {
            Operand::Dot(names) => fields(dot.clone(), names),
            Operand::Var(name, names) => {
                let base = if name.is_empty() {
                    self.root.clone()
                } else {
                    self.vars
                        .iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| format!("undefined variable ${name}"))?
                };
                fields(base, names)
            }
            Operand::Func(name) => self.funcs.call(name, Vec::new())?,
            Operand::Lit(v) => v.clone(),
            Operand::Paren(p) => self.pipeline(p, dot)?,
        })
    }
}
