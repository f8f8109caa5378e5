//! serde-saphyr's errors said in words a person uses: what YAML expected and what the file holds
//! at that place (usually an indentation mistake), instead of parser states ("expected mapping
//! start") or Rust's Debug text ("Nodes { nodes: 100001 }").

use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Error, Location};

use super::closest;
use crate::words::{count, thousands};

/// The limits the YAML reader holds a playbook or inventory to (see `yaml::options`).
pub const MAX_EVENTS: usize = 200_000;
pub const MAX_NODES: usize = 100_000;
pub const MAX_ALIASES: usize = 1_000;
pub const MAX_ANCHORS: usize = 1_000;
pub const MAX_DEPTH: usize = 48;

/// The message for `err`, read against the file's `text`; its place is the error's own.
pub fn explain(err: &Error, text: &str) -> String {
    match err.without_snippet() {
        Error::AliasError { error, locations, .. } => through_alias(error, locations.defined_location, text),
        Error::Budget { breach, .. } => budget(breach),
        Error::Unexpected { expected, location } => wrong_shape(expected, location, text),
        Error::ExpectedMappingEndAfterEnumVariantValue { location } => second_key(location, text),
        Error::ExternalMessage { msg, location, .. } => parser(msg, location, text),
        Error::InvalidScalar { ty, location } => not_a(ty, location, text),
        Error::DuplicateMappingKey { key, .. } => match key {
            Some(key) => {
                format!("`{key}` is given twice in this mapping; a key appears once: remove or rename one")
            }
            None => {
                "this key is given twice in this mapping; a key appears once: remove or rename one".into()
            }
        },
        Error::UnknownAnchor { location } => unknown_anchor(location, text),
        Error::Eof { .. } => "the file ends where a value was expected (is it empty?)".into(),
        Error::SerdeUnknownVariant {
            variant, expected, ..
        } => with_suggestion(
            format!(
                "unknown variant `{variant}`, expected one of {}",
                expected.join(", ")
            ),
            variant,
            expected,
        ),
        Error::SerdeUnknownField { field, expected, .. } => with_suggestion(
            format!("unknown field `{field}`, expected one of {}", expected.join(", ")),
            field,
            expected,
        ),
        other => words_for(&strip_location_suffix(&other.to_string())),
    }
}

/// "…; did you mean `X`?" when one of `expected` is close to `given`.
fn with_suggestion(message: String, given: &str, expected: &[&str]) -> String {
    match closest(given, expected) {
        Some(best) => format!("{message}; did you mean `{best}`?"),
        None => message,
    }
}

/// A problem met while expanding an alias: said with the anchor it came from.
fn through_alias(inner: &Error, anchor: Location, text: &str) -> String {
    let name = token_at(text, &anchor, '&')
        .map(|n| format!(" `&{n}`"))
        .unwrap_or_default();
    let anchor_at = format!("line {}, column {}", anchor.line(), anchor.column());
    match inner.without_snippet() {
        Error::Budget { breach, .. } => format!(
            "this alias expands the anchor{name} (at {anchor_at}) so far that {}; \
             aliases that repeat aliases multiply (an \"alias bomb\"): write the values out, or use fewer aliases",
            breach_text(breach)
        ),
        other => format!(
            "{} (in the value this alias repeats from the anchor{name} at {anchor_at})",
            explain(other, text)
        ),
    }
}

/// A budget breach outside aliases.
fn budget(breach: &BudgetBreach) -> String {
    if let BudgetBreach::Documents { .. } = breach {
        return "the file holds more than one YAML document (a `---` line starts another); \
                a playbook or inventory is one document: remove the `---` and what follows, or move it to a file of its own"
            .into();
    }
    format!(
        "{}, beyond what a playbook or inventory needs, so rigrun refuses the file",
        breach_text(breach)
    )
}

/// What a breach means, with rigrun's limit.
fn breach_text(breach: &BudgetBreach) -> String {
    match breach {
        BudgetBreach::Nodes { .. } => {
            format!("the YAML holds more than {} values", thousands(MAX_NODES as u128))
        }
        BudgetBreach::Events { .. } => {
            format!("the YAML holds more than {} parts", thousands(MAX_EVENTS as u128))
        }
        BudgetBreach::Aliases { .. } => format!(
            "the YAML uses more than {} aliases (`*name`)",
            thousands(MAX_ALIASES as u128)
        ),
        BudgetBreach::Anchors { .. } => format!(
            "the YAML defines more than {} anchors (`&name`)",
            thousands(MAX_ANCHORS as u128)
        ),
        BudgetBreach::Depth { .. } => format!("the YAML nests more than {MAX_DEPTH} levels deep"),
        _ => "the YAML is larger than rigrun reads".into(),
    }
}

/// A list or mapping was expected and something else is there: say what, and why YAML read it so.
fn wrong_shape(expected: &str, at: &Location, text: &str) -> String {
    let want = match expected {
        "mapping start" => "a mapping (`key: value` lines indented under it, or `{key: value}`)",
        "sequence start" => "a list (`- item` lines indented under it, or `[a, b]`)",
        "string scalar" => "text",
        other => other,
    };
    let place = Place::new(text, at);
    if is_blank(place.line) {
        // Placed past a bare list item (`- shell` read as a word): name the item.
        let above = place.lines[..place.index.min(place.lines.len())]
            .iter()
            .rev()
            .find(|l| !is_blank(l));
        if let Some(item) = above
            .map(|l| l.trim())
            .filter(|l| l.starts_with("- ") && !l.contains(':'))
        {
            return format!("the list item `{item}` must be {want}");
        }
    }
    let Some(key) = place.key() else {
        return match place.rest().chars().next() {
            None if at.line() <= 1 => format!("the file is empty; it must be {want}"),
            Some('-') if at.column() == 1 => format!("this file is a list; it must be {want}"),
            _ => format!("{want} is expected here"),
        };
    };
    if place.starts_line() {
        let first = place.line.trim_start();
        let found = if first.starts_with("- ") || first == "-" {
            "a list"
        } else if line_key(place.line).is_some() {
            "a mapping"
        } else {
            "a value"
        };
        return format!(
            "`{key}:` must be {want}, but line {} below it starts {found}",
            at.line()
        );
    }
    // The place may be the key's colon, with the value (if any) after it.
    let rest = place.rest();
    let value = rest.strip_prefix(':').map_or(rest, str::trim_start);
    let value = if value.starts_with('#') { "" } else { value };
    // Inside `{...}` or `[...]` the value ends at the next `,`, `}` or `]`.
    let value = match place.in_flow() {
        true => value.split([',', '}', ']']).next().unwrap_or(""),
        false => value,
    };
    let found = match value.chars().next() {
        Some('[') => "a list".to_string(),
        Some('{') => "a mapping".to_string(),
        Some(_) => format!("`{}`", value.trim_end()),
        None => return nothing_under(&key, want, &place),
    };
    format!("`{key}:` must be {want}, not {found}")
}

/// `key:` with nothing after it on its line: the lines that should be its contents are not
/// indented under it, or there are none.
fn nothing_under(key: &str, want: &str, place: &Place) -> String {
    let key_column = place.key_column();
    match place.next_content_line() {
        Some((number, line)) if indentation(line) > key_column => {
            let first = line.trim_start();
            let shape = if first.starts_with("- ") || first == "-" { "a list" } else { "a mapping" };
            format!("`{key}:` must be {want}, but line {number} below it starts {shape}")
        }
        Some((number, line)) if indentation(line) == key_column => format!(
            "`{key}:` has nothing indented under it: line {number} starts at the same column as `{key}`, \
             so YAML reads it as a key beside `{key}`, not inside it; indent the lines that belong to `{key}` further than it \
             (`{key}:` must be {want})"
        ),
        _ => format!("`{key}:` is empty; it must be {want}"),
    }
}

/// A step's mapping holds a second key beside its kind: a field not indented under the kind.
fn second_key(at: &Location, text: &str) -> String {
    let place = Place::new(text, at);
    let field = place.word().unwrap_or_else(|| "this key".into());
    let kind = place.enclosing_item_key();
    match kind {
        Some(kind) => format!(
            "`{field}:` stands beside `{kind}:`, so YAML reads it as a second key of the step; a step holds one kind, \
             and its fields go under it: indent `{field}:` like the other fields of `{kind}:`"
        ),
        None => format!(
            "`{field}:` stands beside the step's kind, so YAML reads it as a second key of the step; \
             indent it under the kind like the step's other fields"
        ),
    }
}

/// The YAML parser's own messages, for the mistakes people make.
fn parser(msg: &str, at: &Location, text: &str) -> String {
    let place = Place::new(text, at);
    if msg.contains("tab") {
        return "a tab indents this line; YAML indents with spaces only: replace the tab with spaces".into();
    }
    if msg.contains("did not find expected key") || msg.contains("mapping values are not allowed") {
        return misaligned(&place);
    }
    if let Some(bracket) = msg.strip_prefix("unclosed bracket ") {
        return format!("the {} opened here is never closed", bracket.replace('\'', "`"));
    }
    if msg.starts_with("unclosed quote") {
        return "the quote opened here is never closed".into();
    }
    words_for(msg)
}

/// Messages that name an internal limit, said as what they mean for the file.
fn words_for(msg: &str) -> String {
    if msg.starts_with("recursion limit exceeded") {
        return budget(&BudgetBreach::Depth { depth: MAX_DEPTH + 1 });
    }
    // `time` is required in a host's `slurm:` block alone.
    if msg == "missing field `time`" {
        return format!("{msg}: a `slurm:` block needs the allocation's time limit, like `time: 2h`");
    }
    msg.to_string()
}

/// A line whose indentation fits no level of the lines above it.
fn misaligned(place: &Place) -> String {
    let levels = place.levels_above();
    let spaces = count(indentation(place.line), "space");
    let fits: Vec<String> = levels
        .iter()
        .map(|(column, key)| format!("{} (like `{key}:`)", count(*column, "space")))
        .collect();
    let what = line_key(place.line)
        .map(|w| format!("`{w}:`"))
        .unwrap_or_else(|| "this line".into());
    if fits.is_empty() {
        return format!("{what} is indented by {spaces} where YAML expected no key: check its indentation");
    }
    format!(
        "{what} is indented by {spaces}, which lines it up with no key above it; YAML nests by \
         indentation: indent it by {} to put it beside that key",
        or_list(&fits)
    )
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A value that is not of the type the field takes.
fn not_a(ty: &str, at: &Location, text: &str) -> String {
    let value = Place::new(text, at).scalar();
    let kind = match ty {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" | "boolean" => "true or false",
        "char" => "a single character",
        other => other,
    };
    match value {
        Some(v) => format!("`{v}` is not {kind}"),
        None => format!("this value is not {kind}"),
    }
}

/// `*name` with no `&name` before it.
fn unknown_anchor(at: &Location, text: &str) -> String {
    match token_at(text, at, '*') {
        Some(name) => format!(
            "`*{name}` repeats an anchor `&{name}` that no value above defines; define it, or quote the text if `*` was meant literally"
        ),
        None => "this alias repeats an anchor that no value above defines".into(),
    }
}

/// The scalar written at `at` in `text`, as written (`y`, where YAML reads `true`).
pub fn scalar_at(text: &str, at: &Location) -> Option<String> {
    Place::new(text, at).scalar()
}

/// The name after `sigil` (`&` or `*`) at `at`, or, for an anchor, just before it (an
/// anchor's place is the value it names: `&a [1, 2]` is placed at `[`).
fn token_at(text: &str, at: &Location, sigil: char) -> Option<String> {
    let place = Place::new(text, at);
    let name_of = |rest: &str| -> Option<String> {
        let name: String = rest
            .strip_prefix(sigil)?
            .chars()
            .take_while(|c| !c.is_whitespace() && !",[]{}".contains(*c))
            .collect();
        (!name.is_empty()).then_some(name)
    };
    name_of(place.rest()).or_else(|| {
        let before = place.line[..place.at].trim_end();
        let word = before.rsplit(char::is_whitespace).next()?;
        name_of(word)
    })
}

/// The key whose colon ends `line[..end]`: `shell` in `  - shell:`, `c` in `{c:`.
fn key_before(line: &str, end: usize) -> Option<String> {
    let before = line.get(..end.min(line.len()))?.trim_end().strip_suffix(':')?;
    let key = before
        .rsplit(|c: char| c.is_whitespace() || "{,[".contains(c))
        .next()
        .filter(|k| !k.is_empty())?;
    Some(key.to_string())
}

/// Leading spaces.
fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Where a key starts on a line: after the indentation and any `- ` of list items.
fn key_start(line: &str) -> usize {
    let mut at = indentation(line);
    while line[at..].starts_with("- ") {
        at += 2;
        at += indentation(&line[at..]);
    }
    at
}

/// The key a line opens (`name` of `  - name: x`), if it opens one.
fn line_key(line: &str) -> Option<&str> {
    let rest = &line[key_start(line)..];
    let (key, _) = rest.split_once(':')?;
    (!key.is_empty() && !key.contains(' ') && !key.starts_with('#')).then_some(key)
}

/// Whether a line holds nothing but spaces or a comment.
fn is_blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// A place in the file: its line, and the column within it (from 0, in bytes).
struct Place<'a> {
    lines: Vec<&'a str>,
    /// From 0.
    index: usize,
    line: &'a str,
    at: usize,
}

impl<'a> Place<'a> {
    fn new(text: &'a str, loc: &Location) -> Place<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let index = ((loc.line().max(1) - 1) as usize).min(lines.len());
        let line = lines.get(index).copied().unwrap_or("");
        // Columns count characters; the byte where that character starts.
        let at = line
            .char_indices()
            .nth((loc.column().max(1) - 1) as usize)
            .map_or(line.len(), |(i, _)| i);
        Place {
            lines,
            index,
            line,
            at,
        }
    }

    /// The line from the place on, without a trailing comment when it is only that.
    fn rest(&self) -> &'a str {
        let rest = &self.line[self.at..];
        if rest.trim_start().starts_with('#') {
            ""
        } else {
            rest
        }
    }

    /// The word at the place (a key, a scalar's first word).
    fn word(&self) -> Option<String> {
        let word: String = self
            .rest()
            .chars()
            .take_while(|c| c.is_alphanumeric() || "_-.".contains(*c))
            .collect();
        (!word.is_empty()).then_some(word)
    }

    /// The scalar at the place, as written on its line.
    fn scalar(&self) -> Option<String> {
        let value = self.rest().split(" #").next().unwrap_or("").trim_end();
        // Inside `{...}` or `[...]` a scalar ends at the next `,`, `}` or `]`.
        let value = match self.in_flow() {
            true => value.split([',', '}', ']']).next().unwrap_or(""),
            false => value,
        };
        let value = value.trim_end();
        (!value.is_empty()).then(|| value.to_string())
    }

    /// Whether the place is inside a `{...}` or `[...]` opened on its line.
    fn in_flow(&self) -> bool {
        self.line[..self.at].contains(['{', '['])
    }

    /// The key whose value starts at the place: `shell` for `  - shell:` with the place at or
    /// after its colon, or for a place that starts the next line.
    fn key(&self) -> Option<String> {
        if self.at <= key_start(self.line) && self.index > 0 {
            let above = self.lines[..self.index].iter().rev().find(|l| !is_blank(l))?;
            return key_before(above, above.len());
        }
        key_before(self.line, self.at).or_else(|| key_before(self.line, self.at + 1))
    }

    /// Whether the place starts its line's content (a value that begins on the line after its key).
    fn starts_line(&self) -> bool {
        self.at <= key_start(self.line)
    }

    /// The column (from 0) where the place's line opens its key.
    fn key_column(&self) -> usize {
        key_start(self.line)
    }

    /// The first line after the place's that holds something, with its number (from 1).
    fn next_content_line(&self) -> Option<(usize, &'a str)> {
        self.lines
            .iter()
            .enumerate()
            .skip(self.index + 1)
            .find(|(_, l)| !is_blank(l))
            .map(|(i, l)| (i + 1, *l))
    }

    /// The key of the list item that holds the place's line: `shell` for a line under `- shell:`.
    fn enclosing_item_key(&self) -> Option<String> {
        let own = indentation(self.line);
        self.lines[..self.index]
            .iter()
            .rev()
            .filter(|l| !is_blank(l))
            .find(|l| l.trim_start().starts_with("- ") && indentation(l) < own)
            .and_then(|l| line_key(l))
            .map(str::to_string)
    }

    /// The columns keys open at in the lines above, from the innermost out, each with its key:
    /// where a line could stand.
    fn levels_above(&self) -> Vec<(usize, String)> {
        let mut levels: Vec<(usize, String)> = Vec::new();
        let mut limit = usize::MAX;
        for line in self.lines[..self.index].iter().rev().filter(|l| !is_blank(l)) {
            let column = key_start(line);
            if column < limit {
                if let Some(key) = line_key(line) {
                    levels.push((column, key.to_string()));
                }
                limit = column;
            }
            if column == 0 {
                break;
            }
        }
        levels
    }
}

/// serde-saphyr appends " at line X, column Y" (or without the comma); the place is printed
/// first, once.
pub fn strip_location_suffix(message: &str) -> String {
    if let Some(i) = message.rfind(" at line ") {
        let tail = message[i + " at line ".len()..].replace(',', "");
        let mut words = tail.split_whitespace();
        let shape = (words.next(), words.next(), words.next(), words.next());
        if let (Some(line), Some("column"), Some(col), None) = shape {
            if line.parse::<u64>().is_ok() && col.parse::<u64>().is_ok() {
                return message[..i].to_string();
            }
        }
    }
    message.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message serde-saphyr's error gives for `yaml` read as `T`.
    fn message<T: serde::de::DeserializeOwned + std::fmt::Debug>(yaml: &str) -> String {
        let err = serde_saphyr::from_str::<T>(yaml).unwrap_err();
        explain(&err, yaml)
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Kind {
        #[serde(rename = "shell")]
        Shell(Fields),
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    #[serde(deny_unknown_fields)]
    struct Fields {
        command: String,
        timeout: Option<String>,
        retries: Option<u32>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Book {
        name: String,
        hosts: Option<Vec<String>>,
        steps: Vec<Kind>,
    }

    #[test]
    fn fields_level_with_their_kind_are_said_to_need_indenting() {
        let m = message::<Book>("name: t\nsteps:\n  - shell:\n    command: echo\n");
        assert_eq!(
            m,
            "`shell:` has nothing indented under it: line 4 starts at the same column as `shell`, so YAML reads it as a key beside `shell`, not inside it; indent the lines that belong to `shell` further than it (`shell:` must be a mapping (`key: value` lines indented under it, or `{key: value}`))"
        );
    }

    #[test]
    fn a_field_beside_the_kind_is_said_to_be_a_second_key() {
        let m = message::<Book>("name: t\nsteps:\n  - shell:\n      command: echo\n    timeout: 1m\n");
        assert!(
            m.starts_with("`timeout:` stands beside `shell:`, so YAML reads it as a second key of the step"),
            "{m}"
        );
        assert!(
            m.contains("indent `timeout:` like the other fields of `shell:`"),
            "{m}"
        );
    }

    #[test]
    fn a_line_between_levels_names_the_levels_it_could_take() {
        let m = message::<Book>("name: t\nsteps:\n  - shell:\n      command: echo\n     timeout: 1m\n");
        assert_eq!(
            m,
            "`timeout:` is indented by 5 spaces, which lines it up with no key above it; YAML nests by indentation: indent it by 6 spaces (like `command:`), 4 spaces (like `shell:`) or 0 spaces (like `steps:`) to put it beside that key"
        );
    }

    #[test]
    fn a_mapping_where_a_list_belongs_is_named() {
        let m = message::<Book>("name: t\nhosts:\n  gpu1: {}\nsteps: []\n");
        assert!(m.starts_with("`hosts:` must be a list"), "{m}");
        assert!(m.contains("line 3 below it starts a mapping"), "{m}");
        let m = message::<Book>("name: t\nsteps: {a: 1}\n");
        assert!(m.starts_with("`steps:` must be a list"), "{m}");
        assert!(m.ends_with("not a mapping"), "{m}");
        let m = message::<Book>("name: [t]\nsteps: []\n");
        assert_eq!(m, "`name:` must be text, not a list");
    }

    #[test]
    fn wrong_scalars_say_what_the_field_takes() {
        let m = message::<Book>("name: t\nsteps:\n  - shell: {command: x, retries: many}\n");
        assert_eq!(m, "`many` is not a whole number of 0 or more");
    }

    #[test]
    fn tabs_duplicates_and_unknown_anchors_read_as_sentences() {
        let m = message::<Book>("name: t\nsteps:\n\t- shell: {command: x}\n");
        assert!(m.starts_with("a tab indents this line"), "{m}");
        let m = message::<Book>("name: t\nname: u\nsteps: []\n");
        assert_eq!(
            m,
            "`name` is given twice in this mapping; a key appears once: remove or rename one"
        );
        let m = message::<Book>("name: *x\nsteps: []\n");
        assert!(
            m.starts_with("`*x` repeats an anchor `&x` that no value above defines"),
            "{m}"
        );
    }

    #[test]
    fn an_alias_bomb_is_a_sentence_naming_its_anchor() {
        let mut yaml = String::from("name: t\nsteps: []\nvars:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..30 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            yaml.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
        }
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! { max_nodes: MAX_NODES },
        };
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Vars {
            vars: serde_json::Value,
        }
        let err = serde_saphyr::from_str_with_options::<Vars>(&yaml, options).unwrap_err();
        let m = explain(&err, &yaml);
        assert!(m.starts_with("this alias expands the anchor `&a"), "{m}");
        assert!(m.contains("the YAML holds more than 100,000 values"), "{m}");
        assert!(m.contains("alias bomb"), "{m}");
        assert!(!m.contains('{') && !m.contains("Nodes"), "no Debug text: {m}");
    }

    #[test]
    fn unknown_fields_suggest_the_closest() {
        let m = message::<Book>("name: t\nsteps:\n  - shell: {comand: x}\n");
        assert!(m.ends_with("did you mean `command`?"), "{m}");
    }

    #[test]
    fn strips_only_a_trailing_location() {
        assert_eq!(strip_location_suffix("bad value at line 3 column 5"), "bad value");
        assert_eq!(
            strip_location_suffix("bad value at line 3, column 5"),
            "bad value"
        );
        assert_eq!(
            strip_location_suffix("x at line 3, column 12 (used"),
            "x at line 3, column 12 (used"
        );
    }
}
