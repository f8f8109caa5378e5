//! The Prometheus text exposition format (version 0.0.4), as servers print it on `/metrics`:
//! samples by name, labels kept, comments and `# TYPE` lines skipped. Small and strict about
//! what it reads (a line it cannot read is named, not guessed at); no crate in the tree does it.

/// A sample's labels, in the order written.
pub type Labels = Vec<(String, String)>;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// Every sample of `text`, and the lines that could not be read (line number and why).
pub fn parse(text: &str) -> (Vec<MetricSample>, Vec<String>) {
    let (mut samples, mut bad) = (Vec::new(), Vec::new());
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match sample(line) {
            Ok(s) => samples.push(s),
            Err(why) => bad.push(format!("line {}: {why}: {}", n + 1, excerpt(line))),
        }
    }
    (samples, bad)
}

/// The sum of every sample named `name` (a server with several models or engines labels one
/// series each; their sum is the server's), or None when there is none.
pub fn total(samples: &[MetricSample], name: &str) -> Option<f64> {
    let mut values = samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .peekable();
    values.peek()?;
    Some(values.sum())
}

/// The largest value of the samples named `name`.
pub fn max(samples: &[MetricSample], name: &str) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .reduce(f64::max)
}

fn sample(line: &str) -> Result<MetricSample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .ok_or("no value after the metric name")?;
    let name = &line[..name_end];
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("`{name}` is not a metric name"));
    }
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(after) => labels(after)?,
        None => (Vec::new(), &line[name_end..]),
    };
    let value_text = rest.split_ascii_whitespace().next().ok_or("no value")?;
    Ok(MetricSample {
        name: name.to_string(),
        labels,
        value: number(value_text)?,
    })
}

/// `a="x",b="y\"z"}` → the labels and what follows the closing brace.
fn labels(mut text: &str) -> Result<(Labels, &str), String> {
    let mut out = Vec::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((out, rest));
        }
        let (key, rest) = text.split_once('=').ok_or("a label without `=`")?;
        let rest = rest.strip_prefix('"').ok_or("a label value without quotes")?;
        let (value, rest) = quoted(rest)?;
        out.push((key.trim().to_string(), value));
        text = rest;
    }
}

/// A label value up to its closing quote, with `\\`, `\"` and `\n` unescaped.
fn quoted(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => value.push(other),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("a label value without its closing quote".into())
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN` as the format writes them.
fn number(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text.parse().map_err(|_| format!("`{text}` is not a number")),
    }
}

fn excerpt(line: &str) -> String {
    line.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_with_labels_escapes_and_special_values() {
        let text = "# HELP vllm:num_requests_running Number of requests.\n\
                    # TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"a \\\"b\\\"\",engine=\"0\"} 3.0\n\
                    vllm:num_requests_running{model_name=\"c\"} 2\n\
                    sglang:token_usage 2.8e-01 1700000000000\n\
                    x_bucket{le=\"+Inf\"} +Inf\n";
        let (samples, bad) = parse(text);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(samples.len(), 4);
        assert_eq!(
            samples[0].labels,
            vec![
                ("model_name".into(), "a \"b\"".into()),
                ("engine".into(), "0".into())
            ]
        );
        assert_eq!(total(&samples, "vllm:num_requests_running"), Some(5.0));
        assert_eq!(max(&samples, "vllm:num_requests_running"), Some(3.0));
        assert_eq!(total(&samples, "sglang:token_usage"), Some(0.28));
        assert_eq!(samples[3].value, f64::INFINITY);
        assert_eq!(total(&samples, "absent"), None);
    }

    #[test]
    fn names_the_lines_it_cannot_read() {
        let (samples, bad) = parse("ok 1\nbad{x=\"1\" 2\nnovalue\nn{a=\"1\"} one\n<html>\n");
        assert_eq!(samples.len(), 1);
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(bad[0].starts_with("line 2:"), "{bad:?}");
        assert!(bad[2].contains("`one` is not a number"), "{bad:?}");
    }
}
