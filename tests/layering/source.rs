//! A source file read as the layering test needs it: the production code alone (comments,
//! string contents and `#[cfg(test)]` items blanked out, lines kept in place), and every path
//! in it that leaves its own top-level module (`crate::x::…`, or `super::…` climbing to the
//! crate root), with its line.
//!
//! A string that holds nothing but a path (`#[serde(default = "crate::events::first_attempt")]`)
//! is kept as code: the compiler resolves it like one.

/// One path to another top-level module: where it is written and what it names.
#[derive(Debug)]
pub struct Import {
    pub line: usize,
    /// The top-level module it reaches (`steps` for `crate::steps::record_line::Line`).
    pub module: String,
    /// The path as written, spaces squeezed (`crate::{config::Config, plan}` whole).
    pub text: String,
}

/// A production source file: its code and the child modules it declares test-only.
pub struct Source {
    pub code: String,
    /// `mod tests;` under `#[cfg(test)]`: files that are test code as a whole.
    pub test_modules: Vec<String>,
}

impl Source {
    pub fn read(text: &str) -> Source {
        let code = blank_comments_and_strings(text);
        let (code, test_modules) = blank_test_items(&code);
        Source { code, test_modules }
    }

    /// The paths that leave the file's top-level module; `module_path` is the file's place in
    /// the crate (`["config", "steps"]` for `src/config/steps/mod.rs`, `[]` for `lib.rs`).
    pub fn imports(&self, module_path: &[String]) -> Vec<Import> {
        let chars: Vec<char> = self.code.chars().collect();
        let mut imports = Vec::new();
        let (mut i, mut line) = (0, 1);
        while i < chars.len() {
            if chars[i] == '\n' {
                line += 1;
            }
            let starts_word = i == 0 || !(is_ident(chars[i - 1]) || matches!(chars[i - 1], '$' | ':'));
            if starts_word {
                if let Some(import) = path_at(&chars, i, module_path, line) {
                    imports.extend(import);
                }
            }
            i += 1;
        }
        imports
    }
}

/// The imports named by a path starting at `i` (several for a group `crate::{a, b}`), if a
/// path to another top-level module starts there.
fn path_at(chars: &[char], i: usize, module_path: &[String], line: usize) -> Option<Vec<Import>> {
    let word = |at: usize| -> String { chars[at..].iter().take_while(|c| is_ident(**c)).collect() };
    let after = |at: usize, s: &str| chars[at..].iter().take(s.len()).copied().eq(s.chars());
    let mut at = i;
    let base: Vec<String> = match word(at).as_str() {
        "crate" => {
            at += "crate".len();
            Vec::new()
        }
        "super" => {
            let mut base = module_path.to_vec();
            while word(at) == "super" && after(at + 5, "::") {
                base.pop()?;
                at += "super::".len();
            }
            at -= 2;
            base
        }
        _ => return None,
    };
    if !after(at, "::") || !base.is_empty() {
        return None;
    }
    at += 2;
    let text = path_text(chars, i);
    let modules = match chars.get(at) {
        Some('{') => group_heads(chars, at),
        _ => vec![word(at)],
    };
    let imports = modules
        .into_iter()
        .filter(|m| !m.is_empty())
        .map(|module| Import {
            line,
            module,
            text: text.clone(),
        });
    Some(imports.collect())
}

/// The first name of each path in the group `{a::x, b, c::{d, e}}` opening at `open`.
fn group_heads(chars: &[char], open: usize) -> Vec<String> {
    let mut heads = vec![String::new()];
    let (mut depth, mut in_head) = (0, true);
    for &c in &chars[open..] {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                heads.push(String::new());
                in_head = true;
                continue;
            }
            _ => {}
        }
        if depth == 1 && in_head && c != '{' {
            if is_ident(c) {
                heads.last_mut().unwrap().push(c);
            } else if !c.is_whitespace() {
                in_head = false;
            }
        }
    }
    heads
}

/// The path starting at `i` as written: names and `::`, and a group in braces whole.
fn path_text(chars: &[char], i: usize) -> String {
    let mut text = String::new();
    let mut depth = 0;
    for &c in &chars[i..] {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            _ if depth == 0 && !(is_ident(c) || c == ':') => break,
            _ => {}
        }
        if !(c.is_whitespace() && text.ends_with(' ')) {
            text.push(if c.is_whitespace() { ' ' } else { c });
        }
        if c == '}' && depth == 0 {
            break;
        }
    }
    text.trim_end_matches(':').to_string()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments and string contents turned into spaces (newlines kept), except
/// strings that hold a path alone. Every character keeps its place.
pub fn blank_comments_and_strings(text: &str) -> String {
    blank(text, true)
}

/// `text` with comments turned into spaces (newlines kept), strings as written. Every
/// character keeps its place.
pub fn blank_comments(text: &str) -> String {
    blank(text, false)
}

/// Where each string literal of `text` stands (char indexes, quotes and prefixes included).
pub fn string_literals(text: &str) -> Vec<std::ops::Range<usize>> {
    let chars: Vec<char> = text.chars().collect();
    let literals = spans(&chars).into_iter().filter(|(_, comment)| !comment);
    literals
        .map(|(span, _)| span)
        .filter(|span| chars[span.start] != '\'')
        .collect()
}

/// `text` with comments blanked, and string contents too when `strings`.
fn blank(text: &str, strings: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank =
        |out: &mut String, s: &[char]| out.extend(s.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    let mut at = 0;
    for (span, comment) in spans(&chars) {
        out.extend(&chars[at..span.start]);
        at = span.end;
        let literal: String = chars[span.clone()].iter().collect();
        if !strings && !comment {
            out.push_str(&literal);
            continue;
        }
        match path_alone(&literal) {
            Some(path) => {
                blank(&mut out, &chars[span.start..span.end - path.chars().count() - 1]);
                out.push_str(path);
                out.push(' ');
            }
            None if literal == "'" => out.push('\''),
            None => blank(&mut out, &chars[span]),
        }
    }
    out.extend(&chars[at..]);
    out
}

/// The comments and literals (strings, chars) of a source, in order: each one's characters,
/// and whether it is a comment.
fn spans(chars: &[char]) -> Vec<(std::ops::Range<usize>, bool)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let prev_ident = i > 0 && is_ident(chars[i - 1]);
        let (end, comment) = if rest.starts_with(&['/', '/']) {
            (
                i + rest.iter().position(|&c| c == '\n').unwrap_or(rest.len()),
                true,
            )
        } else if rest.starts_with(&['/', '*']) {
            (block_comment_end(chars, i), true)
        } else if let Some(end) = (!prev_ident).then(|| raw_string_end(chars, i)).flatten() {
            (end, false)
        } else if chars[i] == '"' {
            (string_end(chars, i), false)
        } else if chars[i] == '\'' {
            (char_literal_end(chars, i).unwrap_or(i + 1), false)
        } else {
            i += 1;
            continue;
        };
        spans.push((i..end, comment));
        i = end;
    }
    spans
}

/// The path a string literal holds, when it holds nothing else (`"crate::events::is_first"`).
fn path_alone(literal: &str) -> Option<&str> {
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let is_path = (inner.starts_with("crate::") || inner.starts_with("super::"))
        && inner
            .split("::")
            .all(|s| !s.is_empty() && s.chars().all(is_ident));
    is_path.then_some(inner)
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => (depth, i) = (depth + 1, i + 2),
            ('*', '/') => {
                (depth, i) = (depth - 1, i + 2);
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// The end of `r"…"`, `r#"…"#` or `br#"…"#` starting at `i`, if one starts there.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut at = i + usize::from(chars[i] == 'b');
    if chars.get(at) != Some(&'r') {
        return None;
    }
    at += 1;
    let hashes = chars[at..].iter().take_while(|&&c| c == '#').count();
    at += hashes;
    if chars.get(at) != Some(&'"') {
        return None;
    }
    let close: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let body = at + 1;
    let found = (body..chars.len()).find(|&k| chars[k..].starts_with(&close));
    Some(found.map_or(chars.len(), |k| k + close.len()))
}

fn string_end(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// The end of a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) at `start`; None for a lifetime.
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    match chars.get(start + 1)? {
        '\\' => (start + 2..chars.len())
            .find(|&k| chars[k] == '\'')
            .map(|k| k + 1),
        _ if chars.get(start + 2) == Some(&'\'') => Some(start + 3),
        _ => None,
    }
}

/// `code` with every `#[cfg(test)]` item blanked out (lines kept), and the names of the child
/// modules declared test-only (`#[cfg(test)] mod tests;`).
fn blank_test_items(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut chars: Vec<char> = code.chars().collect();
    let mut test_modules = Vec::new();
    let mut from = 0;
    while let Some(start) = find(&chars, MARK, from) {
        let end = item_end(&chars, start + MARK.len());
        let item: String = chars[start..end].iter().collect();
        let words: Vec<&str> = item
            .split(|c: char| !is_ident(c))
            .filter(|w| !w.is_empty())
            .collect();
        if let [.., "mod", name] = words.as_slice() {
            if item.trim_end().ends_with(';') {
                test_modules.push(name.to_string());
            }
        }
        for c in &mut chars[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = end;
    }
    (chars.into_iter().collect(), test_modules)
}

fn find(chars: &[char], needle: &str, from: usize) -> Option<usize> {
    let needle: Vec<char> = needle.chars().collect();
    (from..chars.len()).find(|&i| chars[i..].starts_with(&needle))
}

/// The end of the item after an attribute: further attributes, then up to its `;` or the end
/// of its braces.
pub fn item_end(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        match chars[i] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return i + 1,
            '{' if depth == 0 => {
                let mut braces = 0;
                for (k, &c) in chars.iter().enumerate().skip(i) {
                    match c {
                        '{' => braces += 1,
                        '}' => {
                            braces -= 1;
                            if braces == 0 {
                                return k + 1;
                            }
                        }
                        _ => {}
                    }
                }
                return chars.len();
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(code: &str, at: &[&str]) -> Vec<(usize, String, String)> {
        let at: Vec<String> = at.iter().map(|s| s.to_string()).collect();
        let found = Source::read(code).imports(&at);
        found.into_iter().map(|i| (i.line, i.module, i.text)).collect()
    }

    #[test]
    fn paths_uses_groups_and_supers_are_found_with_their_line() {
        let code = "use crate::events::Event;\nuse crate::{config::Config, plan};\nfn f() { crate::point::label(x); super::words::count(1, \"\"); }\n";
        let found = imports(code, &["report"]);
        let modules: Vec<&str> = found.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(modules, ["events", "config", "plan", "point", "words"]);
        assert_eq!(found[1].0, 2);
        assert_eq!(found[1].2, "crate::{config::Config, plan}");
        assert_eq!(found[4].2, "super::words::count");
        assert!(
            imports("use super::cell::Cell;", &["report", "grid"]).is_empty(),
            "within report"
        );
        assert_eq!(
            imports("use super::super::exit::Exit;", &["config", "steps"])[0].1,
            "exit"
        );
        assert!(imports("use super::super::Config;", &["config", "steps", "shell"]).is_empty());
    }

    #[test]
    fn comments_strings_and_test_code_are_not_imports() {
        let code = "// crate::steps\n/// [`crate::http`]\n/* crate::a /* crate::b */ */\nlet s = \"see crate::report\";\nlet r = r#\"crate::sim\"#;\nlet c = '\"'; let l: &'static str;\n#[cfg(test)]\nmod tests {\n    use crate::bench;\n}\n#[cfg(test)]\nmod more;\nuse crate::words;\n";
        let found = imports(code, &["plan"]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].0, found[0].1.as_str()), (13, "words"));
        assert_eq!(Source::read(code).test_modules, ["more"]);
    }

    #[test]
    fn a_string_holding_a_path_alone_is_an_import() {
        let code = "#[serde(skip_serializing_if = \"crate::events::is_first\")]\nx: u32,";
        assert_eq!(imports(code, &["config", "steps", "run_sweep"])[0].1, "events");
    }
}
