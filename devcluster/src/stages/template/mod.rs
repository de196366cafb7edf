//! A focused evaluator of the Go `text/template` subset kwok's stage files use.
//!
//! Why not a crate: `gtmpl` (the Go-template crate for Rust) has had no
//! release since 2021, has no variable re-assignment (`{{ $x = … }}`, used by
//! kwok's `node-initialize`) and no `range $i, $e :=` over JSON values without
//! conversions; kwok's files need a small, exact subset, which this module
//! implements and tests against kwok's own golden outputs.
//!
//! Supported: text and actions with `{{-`/`-}}` trimming and comments;
//! pipelines with `|`; variables (`$x := …`, `$x = …`, `$`); fields on the
//! dot or a variable (`.a.b`, `$x.a`); literals (strings, raw strings,
//! numbers, `true`, `false`, `nil`); parentheses; `if`/`else if`/`else`,
//! `with`/`else`, `range` (with `$i, $e :=`) and `end`. Functions come from a
//! [`Funcs`] table (kwok's and a subset of Go's and sprig's: see
//! [`funcs::KwokFuncs`]).
//!
//! Files: `parse` (text → [`Node`]s), `eval` (nodes × data → text), `funcs`
//! (the function table).

mod eval;
pub mod funcs;
mod parse;
#[cfg(test)]
mod tests;

use serde_json::Value;

/// A template that cannot be parsed or executed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    /// The template text is malformed or uses something this subset lacks.
    #[error("cannot parse template: {0}")]
    Parse(String),
    /// Execution failed (an unknown function, a wrong argument).
    #[error("cannot execute template: {0}")]
    Exec(String),
    /// The rendered text is not a YAML (or JSON) document.
    #[error("the rendered template is not YAML: {message}; rendered text:\n{text}")]
    NotYaml {
        /// The YAML parser's complaint.
        message: String,
        /// What the template rendered.
        text: String,
    },
}

/// The functions a template may call.
pub trait Funcs {
    /// Calls `name` with evaluated `args`; `Err` names what is wrong.
    ///
    /// # Errors
    /// An unknown function or wrong arguments.
    fn call(&self, name: &str, args: Vec<Value>) -> Result<Value, String>;
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Output(Pipeline),
    If {
        pipe: Pipeline,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    With {
        pipe: Pipeline,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    Range {
        pipe: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// Whether a pipeline declares or assigns variables.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Binding {
    None,
    Declare,
    Assign,
}

/// `$a, $b := cmd | cmd …`.
#[derive(Debug, Clone, PartialEq)]
struct Pipeline {
    vars: Vec<String>,
    binding: Binding,
    cmds: Vec<Vec<Operand>>,
}

/// One argument of a command.
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `.` followed by fields (`.` alone has none).
    Dot(Vec<String>),
    /// `$name` followed by fields (`$` is the root).
    Var(String, Vec<String>),
    /// A function name.
    Func(String),
    /// A literal.
    Lit(Value),
    /// `( pipeline )`.
    Paren(Box<Pipeline>),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    nodes: Vec<Node>,
}

impl Template {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`TemplateError::Parse`] for malformed text or unsupported syntax.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        parse::parse(text)
            .map(|nodes| Template { nodes })
            .map_err(TemplateError::Parse)
    }

    /// Renders the template with `data` as the dot.
    ///
    /// # Errors
    /// [`TemplateError::Exec`] when a function fails or is unknown.
    pub fn render(&self, data: &Value, funcs: &dyn Funcs) -> Result<String, TemplateError> {
        eval::render(&self.nodes, data, funcs).map_err(TemplateError::Exec)
    }

    /// Renders the template and parses the result as YAML into JSON, as kwok's
    /// `Renderer.ToJSON` does.
    ///
    /// # Errors
    /// [`TemplateError::Exec`] or [`TemplateError::NotYaml`].
    pub fn render_json(&self, data: &Value, funcs: &dyn Funcs) -> Result<Value, TemplateError> {
        let text = self.render(data, funcs)?;
        let value: Value = serde_yaml::from_str(&text).map_err(|e| TemplateError::NotYaml {
            message: e.to_string(),
            text: text.clone(),
        })?;
        Ok(value)
    }
}

/// Go's truthiness (`if`, `with`, `and`, `or`, `not`): empty values and zero are false.
pub(super) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}
