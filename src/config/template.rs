//! Templating with minijinja: `{{ var }}` in playbook fields, shell-quoted inside commands.
//!
//! A value substituted into a shell command is quoted only where it needs to be, so plain URLs and
//! numbers read naturally and `$(touch /tmp/x); y` reaches the program as one literal argument.
//! `{{ value | safe }}` opts out of quoting for values that are meant to be several arguments.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::OnceLock;

use minijinja::value::Value;
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde::Serialize;
use serde_saphyr::Spanned;

/// A template string with the place it was written, for errors.
pub type Text = Spanned<String>;

/// Which text fields of a step are shell commands (their substitutions get shell-quoted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Quoting {
    Plain,
    Shell,
}

/// The steps one render may take (minijinja's fuel: about one per instruction and one per 64
/// bytes of data made). A playbook's command takes tens and a templated script thousands, so a
/// million is generous, yet a runaway loop stops there within a fraction of a second.
pub const FUEL: u64 = 1_000_000;

/// The steps planning a whole playbook may take (`check`, `plan`, and `run` before it starts):
/// every template and `skip_if`, for every host and sweep point. The largest sweep (10,000
/// points) of a typical command takes under a million per host; five million keep `check`
/// under a second even where a step of fuel costs more than usual (building long lists).
pub const PLAN_FUEL: u64 = 5_000_000;

/// The text a whole plan may render, all hosts and points together: 32 MiB. Fuel alone would
/// allow gigabytes (a step per 64 bytes), all of it kept in the plan.
pub const PLAN_BYTES: u64 = 32 * 1024 * 1024;

/// What is left of a plan's budget.
#[derive(Clone, Copy)]
struct PlanLeft {
    fuel: u64,
    bytes: u64,
}

thread_local! {
    /// The budget left to the plan being built on this thread, if one is (see [`with_plan_budget`]).
    static PLAN_LEFT: Cell<Option<PlanLeft>> = const { Cell::new(None) };
}

/// Runs `f` (building a plan) with [`PLAN_FUEL`] and [`PLAN_BYTES`] for all the renders it makes
/// on this thread.
pub fn with_plan_budget<T>(f: impl FnOnce() -> T) -> T {
    with_budget(PLAN_FUEL, f)
}

/// Runs `f` with `fuel` (and [`PLAN_BYTES`]) for all the renders it makes on this thread.
fn with_budget<T>(fuel: u64, f: impl FnOnce() -> T) -> T {
    let budget = PlanLeft {
        fuel,
        bytes: PLAN_BYTES,
    };
    let outer = PLAN_LEFT.replace(Some(budget));
    let result = f();
    PLAN_LEFT.set(outer);
    result
}

/// Takes what a render used (its fuel, `bytes` of output) from the plan's budget; an error once
/// the budget is spent.
fn charge_plan(state: &minijinja::State, bytes: usize) -> Result<(), String> {
    let (Some(left), Some((fuel, _))) = (PLAN_LEFT.get(), state.fuel_levels()) else {
        return Ok(());
    };
    let bytes = bytes as u64;
    PLAN_LEFT.set(Some(PlanLeft {
        fuel: left.fuel.saturating_sub(fuel),
        bytes: left.bytes.saturating_sub(bytes),
    }));
    let spent = if fuel > left.fuel {
        format!("its budget of {PLAN_FUEL} template steps")
    } else if bytes > left.bytes {
        format!("its {PLAN_BYTES} bytes of rendered text")
    } else {
        return Ok(());
    };
    Err(format!(
        "planning ran out of {spent} for the whole playbook (every template and skip_if, for every host and sweep point; rigrun's limit, so that `check` cannot hang or fill memory); make the templates that run per point cheaper, or use fewer points or hosts"
    ))
}

/// The largest text one template may render to: 1 MiB. Commands are a line and templated
/// scripts kilobytes (`bench_throughput.py` is 34 kB).
pub const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// Shell that prints the sha256 of the file at `path` (already quoted or a `"$var"`) and its
/// name, as `sha256sum` (GNU) or `shasum -a 256` (macOS, BSD) does; nothing when the host has
/// neither, so that callers can add their own fallback after `||`.
pub fn sha256_command(path: &str) -> String {
    format!("sha256sum {path} 2>/dev/null || shasum -a 256 {path} 2>/dev/null")
}

/// Quotes `text` for a POSIX shell, leaving it bare when it holds only safe characters. A
/// leading `~/` stays outside the quotes so that the shell still expands it to the home folder.
/// (Not `shlex::try_quote`: it has no such rule, and it would quote words that need none, which
/// would change every command `rigrun plan` shows.)
pub fn shell_quote(text: &str) -> String {
    if let Some(rest) = text.strip_prefix("~/") {
        return format!(
            "~/{}",
            if rest.is_empty() {
                String::new()
            } else {
                shell_quote(rest)
            }
        );
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn environment(quoting: Quoting) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    if quoting == Quoting::Shell {
        env.set_formatter(|out, state, value| {
            if value.is_safe() {
                return minijinja::escape_formatter(out, state, value);
            }
            let text = if value.is_none() {
                String::new()
            } else {
                value.to_string()
            };
            out.write_str(&shell_quote(&text))
                .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string()))
        });
    }
    env
}

fn env_for(quoting: Quoting) -> &'static Environment<'static> {
    static PLAIN: OnceLock<Environment<'static>> = OnceLock::new();
    static SHELL: OnceLock<Environment<'static>> = OnceLock::new();
    match quoting {
        Quoting::Plain => PLAIN.get_or_init(|| environment(Quoting::Plain)),
        Quoting::Shell => SHELL.get_or_init(|| environment(Quoting::Shell)),
    }
}

/// Renders `source` with the variables in `ctx`; an undefined variable is an error, and so is a
/// render beyond the budget ([`FUEL`]) or the size limit ([`MAX_RENDERED_BYTES`]).
pub fn render(source: &str, quoting: Quoting, ctx: &Value) -> Result<String, String> {
    let tmpl = env_for(quoting)
        .template_from_str(source)
        .map_err(|e| describe(&e))?;
    let mut out = Bounded(Vec::new());
    let captured = tmpl
        .render_captured_to(ctx.clone(), &mut out)
        .map_err(|e| describe(&e))?;
    charge_plan(captured.state(), out.0.len())?;
    // minijinja writes only `str`s, so the bytes are UTF-8.
    Ok(String::from_utf8_lossy(&out.0).into_owned())
}

/// A buffer that refuses to grow past [`MAX_RENDERED_BYTES`], so an oversized render fails
/// while it is written rather than after it has filled memory.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            return Err(std::io::Error::other("rendered text too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The functions every template may call: minijinja's globals (`range`, `dict`, ...).
pub fn functions() -> Vec<&'static str> {
    env_for(Quoting::Plain).globals().map(|(name, _)| name).collect()
}

/// Whether `source` calls `name` as a function (`name(`), as opposed to using it as a variable.
pub fn calls(source: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    source.match_indices(name).any(|(i, _)| {
        let before = source[..i].chars().next_back();
        let after = source[i + name.len()..].trim_start();
        !before.is_some_and(|c| word(c) || c == '.') && after.starts_with('(')
    })
}

/// The message for a function that rigrun's templates do not have.
pub fn unsupported_function(name: &str) -> String {
    format!(
        "the template function `{name}` is not supported (rigrun's templates offer: {}, and minijinja's filters such as `| default` and `| join`, listed at https://docs.rs/minijinja/latest/minijinja/filters/)",
        functions().join(", ")
    )
}

/// The top-level variable names a template uses, or its syntax error.
pub fn variables(source: &str) -> Result<HashSet<String>, String> {
    let tmpl = env_for(Quoting::Plain)
        .template_from_str(source)
        .map_err(|e| describe(&e))?;
    Ok(tmpl.undeclared_variables(false))
}

/// The variable names an expression (`skip_if`) uses, or its syntax error.
pub fn expression_variables(expr: &str) -> Result<HashSet<String>, String> {
    let compiled = env_for(Quoting::Plain)
        .compile_expression(expr)
        .map_err(|e| describe(&e))?;
    Ok(compiled.undeclared_variables(false))
}

/// Evaluates an expression to a value. It runs as `{% set value = (EXPR) %}` so that the fuel
/// it takes is known and charged to the plan's budget (a bare expression does not tell).
pub fn eval(expr: &str, ctx: &Value) -> Result<Value, String> {
    let env = env_for(Quoting::Plain);
    // Compiled alone first: the expression's own errors, and nothing but an expression inside
    // the block below.
    env.compile_expression(expr).map_err(|e| describe(&e))?;
    let source = format!("{{% set value = ({expr}) %}}");
    let tmpl = env.template_from_str(&source).map_err(|e| describe(&e))?;
    let captured = tmpl.render_captured(ctx.clone()).map_err(|e| describe(&e))?;
    charge_plan(captured.state(), 0)?;
    Ok(captured.state().lookup("value").unwrap_or_default())
}

fn describe(err: &minijinja::Error) -> String {
    let mut text = match err.kind() {
        ErrorKind::OutOfFuel => format!(
            "the template ran out of its budget of {FUEL} steps (rigrun's limit, so that no template can hang); a loop runs too long: loop over fewer items, or move the work into the script"
        ),
        ErrorKind::WriteFailure => format!(
            "the template renders to more than {MAX_RENDERED_BYTES} bytes (rigrun's limit); render less, or copy a file that needs no template"
        ),
        ErrorKind::UnknownFunction => unsupported_function(unknown_name(err)),
        ErrorKind::UnknownFilter => format!(
            "the template filter `{}` is not supported (rigrun's templates offer minijinja's filters, listed at https://docs.rs/minijinja/latest/minijinja/filters/)",
            unknown_name(err)
        ),
        _ => match err.detail() {
            Some(detail) => format!("{}: {detail}", err.kind()),
            None => err.kind().to_string(),
        },
    };
    if let Some(line) = err.line().filter(|&l| l > 1) {
        text.push_str(&format!(" (line {line} of the template)"));
    }
    text
}

/// The name in minijinja's "`[filter ]NAME is unknown`".
fn unknown_name(err: &minijinja::Error) -> &str {
    let detail = err.detail().unwrap_or("");
    let name = detail.strip_suffix(" is unknown").unwrap_or(detail);
    name.strip_prefix("filter ").unwrap_or(name)
}

/// Evaluates `skip_if` and, when it holds, explains why in numbers:
/// `concurrency * (input_len + output_len) = 2048000 > kv_capacity_tokens = 1570000`.
pub fn skip_reason(expr: &str, ctx: &Value) -> Result<Option<String>, String> {
    if !eval(expr, ctx)?.is_true() {
        return Ok(None);
    }
    let clauses = split_top_level(expr, &[" or "]);
    for clause in &clauses {
        if clauses.len() > 1 && !eval(clause, ctx)?.is_true() {
            continue;
        }
        return Ok(Some(explain_comparison(clause.trim(), ctx)));
    }
    Ok(Some(expr.trim().to_string()))
}

const COMPARISONS: &[&str] = &[">=", "<=", "!=", "==", ">", "<"];

fn explain_comparison(clause: &str, ctx: &Value) -> String {
    for op in COMPARISONS {
        let parts = split_top_level(clause, &[op]);
        if parts.len() != 2 {
            continue;
        }
        let side = |s: &str| {
            let s = s.trim();
            match eval(s, ctx) {
                Ok(v) if is_literal(s) => v.to_string(),
                Ok(v) => format!("{s} = {v}"),
                Err(_) => s.to_string(),
            }
        };
        return format!("{} {op} {}", side(&parts[0]), side(&parts[1]));
    }
    clause.to_string()
}

fn is_literal(s: &str) -> bool {
    s.parse::<f64>().is_ok()
}

/// Splits `text` on any of `seps` where they stand outside brackets and quotes.
fn split_top_level(text: &str, seps: &[&str]) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start, mut i) = (0i32, None::<u8>, 0usize, 0usize);
    let bytes = text.as_bytes();
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                _ if depth == 0 => {
                    if let Some(sep) = seps.iter().find(|s| text[i..].starts_with(**s)) {
                        // `>` must not match the first half of `>=`.
                        let next = bytes.get(i + sep.len()).copied();
                        if !(sep.len() == 1 && next == Some(b'=')) {
                            parts.push(text[start..i].to_string());
                            i += sep.len();
                            start = i;
                            continue;
                        }
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    parts.push(text[start..].to_string());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;

    #[test]
    fn quotes_only_where_needed() {
        assert_eq!(shell_quote("http://127.0.0.1:30000"), "http://127.0.0.1:30000");
        assert_eq!(shell_quote("1000"), "1000");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("$(touch /tmp/x); y"), "'$(touch /tmp/x); y'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("~/.rigrun"), "~/.rigrun");
        assert_eq!(shell_quote("~/my dir"), "~/'my dir'");
        assert_eq!(shell_quote("~root"), "'~root'");
    }

    #[test]
    fn shell_commands_quote_substitutions_but_not_the_template() {
        let ctx = Value::from(minijinja::value::Serde(
            serde_json::json!({"v": "$(id); x", "n": 4}),
        ));
        let out = render("echo {{ v }} --n {{ n }}", Quoting::Shell, &ctx).unwrap();
        assert_eq!(out, "echo '$(id); x' --n 4");
        let raw = render("echo {{ v | safe }}", Quoting::Shell, &ctx).unwrap();
        assert_eq!(raw, "echo $(id); x");
        let plain = render("{{ v }}", Quoting::Plain, &ctx).unwrap();
        assert_eq!(plain, "$(id); x");
    }

    #[test]
    fn a_runaway_loop_runs_out_of_fuel() {
        let nested = "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}";
        let err = render(nested, Quoting::Plain, &context! {}).unwrap_err();
        assert!(err.contains("ran out of its budget of 1000000 steps"), "{err}");
    }

    #[test]
    fn a_plan_has_one_budget_for_all_its_renders() {
        let loop_ = "{% for a in range(10000) %}{% for b in range(10) %}x{% endfor %}{% endfor %}";
        let ctx = context! {};
        assert!(
            render(loop_, Quoting::Plain, &ctx).is_ok(),
            "one render fits its own budget"
        );
        // The real budget is PLAN_FUEL; a smaller one keeps the test quick.
        let err = with_budget(2_000_000, || {
            (0..1000)
                .map(|_| render(loop_, Quoting::Plain, &ctx))
                .find_map(Result::err)
        });
        assert!(err
            .unwrap()
            .contains("planning ran out of its budget of 5000000 template steps"));
        let big = "{{ 'x' * 1000000 }}";
        let err = with_plan_budget(|| {
            (0..40)
                .map(|_| render(big, Quoting::Plain, &ctx))
                .find_map(Result::err)
        });
        assert!(err
            .unwrap()
            .contains("planning ran out of its 33554432 bytes of rendered text"));
        assert!(
            render(loop_, Quoting::Plain, &ctx).is_ok(),
            "the budget ends with the plan"
        );
        let skip = with_plan_budget(|| skip_reason("range(3) | length > 2", &ctx));
        assert_eq!(skip.unwrap().as_deref(), Some("range(3) | length = 3 > 2"));
    }

    #[test]
    fn an_oversized_render_is_refused() {
        let err = render("{{ 'x' * 5000000 }}", Quoting::Plain, &context! {}).unwrap_err();
        assert!(err.contains("renders to more than 1048576 bytes"), "{err}");
    }

    #[test]
    fn builtin_functions_work_and_unknown_ones_say_so() {
        let out = render(
            "{% for i in range(3) %}{{ i }}{% endfor %}",
            Quoting::Plain,
            &context! {},
        );
        assert_eq!(out.unwrap(), "012");
        assert!(functions().contains(&"range"));
        let err = render("{{ nope(1) }}", Quoting::Plain, &context! {}).unwrap_err();
        assert!(
            err.contains("the template function `nope` is not supported"),
            "{err}"
        );
        assert!(err.contains("offer: "), "{err}");
        let err = render("{{ 1 | nofilter }}", Quoting::Plain, &context! {}).unwrap_err();
        assert!(
            err.contains("the template filter `nofilter` is not supported"),
            "{err}"
        );
    }

    #[test]
    fn calls_tells_a_call_from_a_variable() {
        assert!(calls("{{ f(1) }}", "f"));
        assert!(calls("{{ f (1) }}", "f"));
        assert!(!calls("{{ f }} (1)", "f"));
        assert!(!calls("{{ x.f(1) }}", "f"));
        assert!(!calls("{{ gf(1) }}", "f"));
    }

    #[test]
    fn undefined_variables_are_errors() {
        let err = render("{{ nope }}", Quoting::Plain, &context! {}).unwrap_err();
        assert!(err.contains("undefined"), "{err}");
    }

    #[test]
    fn lists_the_variables_a_template_uses() {
        let vars = variables("{{ a }} {{ b.c }} {% for x in items %}{{ x }}{% endfor %}").unwrap();
        let mut vars: Vec<_> = vars.into_iter().collect();
        vars.sort();
        assert_eq!(vars, ["a", "b", "items"]);
        assert!(variables("{{ unclosed").is_err());
    }

    #[test]
    fn skip_reason_shows_both_sides_in_numbers() {
        let ctx = context! { concurrency => 1024, input_len => 1000, output_len => 1000, kv_capacity_tokens => 1570000 };
        let expr = "concurrency * (input_len + output_len) > kv_capacity_tokens";
        assert_eq!(
            skip_reason(expr, &ctx).unwrap().unwrap(),
            "concurrency * (input_len + output_len) = 2048000 > kv_capacity_tokens = 1570000"
        );
        let ctx = context! { concurrency => 512, input_len => 1000, output_len => 1000, kv_capacity_tokens => 1570000 };
        assert_eq!(skip_reason(expr, &ctx).unwrap(), None);
    }

    #[test]
    fn skip_reason_names_the_clause_that_held() {
        let ctx = context! { a => 5, b => 1 };
        let why = skip_reason("a > 10 or b >= 1", &ctx).unwrap().unwrap();
        assert_eq!(why, "b = 1 >= 1");
    }

    #[test]
    fn splitting_respects_brackets_and_quotes() {
        assert_eq!(split_top_level("f(a > b) > c", &[">"]), ["f(a > b) ", " c"]);
        assert_eq!(split_top_level("'x > y' == s", &["=="]), ["'x > y' ", " s"]);
        assert_eq!(split_top_level("a >= b", &[">"]), ["a >= b"]);
    }
}
