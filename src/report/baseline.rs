//! Which column of a run's tables each column is compared with (`--baseline`). A column is a
//! host, or `host/variant` for a server variant. The baseline may name a column (every other
//! column against it), a host (each column of another host against the same variant on it) or
//! a variant (`spec=off`: each host's other variants against that host's `spec=off`). Without
//! `--baseline`: the first column, or with variants the first variant of each host.

use anyhow::{bail, Result};
use indexmap::IndexMap;

/// The ratio columns to add: (column, its baseline) as indexes into the columns, in order.
#[derive(Debug, PartialEq)]
pub struct Baseline {
    pub pairs: Vec<(usize, usize)>,
    /// What the user named (or the default), for sentences: `a`, `spec=off`.
    pub name: String,
}

/// The pairs `asked` (or the default) makes of `columns`; an error naming what there is when
/// it names no host, column or variant of them.
pub fn resolve(columns: &[String], asked: Option<&str>) -> Result<Baseline> {
    let parsed: Vec<(&str, Option<Variant>)> = columns.iter().map(|c| split(c)).collect();
    let has_variants = parsed.iter().any(|(_, v)| v.is_some());
    let name = match asked {
        Some(b) => b.to_string(),
        None if has_variants => parsed
            .first()
            .and_then(|(_, v)| v.as_ref())
            .map(label)
            .unwrap_or_default(),
        None => match columns.first() {
            Some(first) => first.clone(),
            None => bail!("the run has no hosts"),
        },
    };
    let wanted = parse_variant(&name).filter(|_| has_variants);
    let pairs = if let Some(base) = columns.iter().position(|c| *c == name) {
        (0..columns.len())
            .filter(|&i| i != base)
            .map(|i| (i, base))
            .collect()
    } else if parsed.iter().any(|(h, v)| *h == name && v.is_some()) {
        same_variant_on(&parsed, &name)
    } else if let Some(wanted) = wanted.filter(|w| parsed.iter().any(|(_, v)| has(v, w))) {
        same_host_with(&parsed, &wanted)
    } else if has_variants {
        bail!(
            "--baseline {name}: no such host, column or variant (axis=value) in the run (columns: {})",
            columns.join(", ")
        )
    } else {
        bail!(
            "--baseline {name}: no such host in the run (hosts: {})",
            columns.join(", ")
        )
    };
    Ok(Baseline { pairs, name })
}

/// A variant's values, as its label names them.
type Variant = IndexMap<String, String>;

/// `host/spec=off,tp=4` → (`host`, {spec: off, tp: 4}); a plain host has no variant.
fn split(column: &str) -> (&str, Option<Variant>) {
    match column.split_once('/') {
        Some((host, label)) => (host, parse_variant(label)),
        None => (column, None),
    }
}

/// `spec=off,tp=4` as its values; None unless every part is `axis=value`.
fn parse_variant(label: &str) -> Option<Variant> {
    label
        .split(',')
        .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// Whether `variant` has every value of `wanted`.
fn has(variant: &Option<Variant>, wanted: &Variant) -> bool {
    variant
        .as_ref()
        .is_some_and(|v| wanted.iter().all(|(k, value)| v.get(k) == Some(value)))
}

fn label(variant: &Variant) -> String {
    let parts: Vec<String> = variant.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

/// Each column of another host against `host`'s column of the same variant.
fn same_variant_on(parsed: &[(&str, Option<Variant>)], host: &str) -> Vec<(usize, usize)> {
    let find = |variant: &Option<Variant>| parsed.iter().position(|(h, v)| *h == host && v == variant);
    (0..parsed.len())
        .filter(|&i| parsed[i].0 != host)
        .filter_map(|i| Some((i, find(&parsed[i].1)?)))
        .collect()
}

/// Each column against its own host's column whose variant has `wanted`'s values (its other
/// axes the same), when that is another column.
fn same_host_with(parsed: &[(&str, Option<Variant>)], wanted: &Variant) -> Vec<(usize, usize)> {
    let target = |v: &Variant| {
        let mut t = v.clone();
        for (k, value) in wanted {
            t.insert(k.clone(), value.clone());
        }
        t
    };
    let find = |host: &str, t: &Variant| {
        parsed
            .iter()
            .position(|(h, v)| *h == host && v.as_ref() == Some(t))
    };
    (0..parsed.len())
        .filter_map(|i| {
            let (host, Some(v)) = &parsed[i] else { return None };
            let base = find(host, &target(v))?;
            (base != i).then_some((i, base))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn without_variants_the_baseline_is_a_host() {
        let cols = columns(&["a", "b", "c"]);
        assert_eq!(resolve(&cols, None).unwrap().pairs, vec![(1, 0), (2, 0)]);
        assert_eq!(resolve(&cols, Some("b")).unwrap().pairs, vec![(0, 1), (2, 1)]);
        let err = resolve(&cols, Some("d")).unwrap_err().to_string();
        assert!(err.contains("no such host in the run (hosts: a, b, c)"), "{err}");
    }

    #[test]
    fn a_variant_baseline_pairs_each_host_with_its_own() {
        let cols = columns(&["a/spec=off", "a/spec=on", "b/spec=off", "b/spec=on"]);
        let by_variant = resolve(&cols, Some("spec=off")).unwrap();
        assert_eq!(by_variant.pairs, vec![(1, 0), (3, 2)]);
        // The default: each host's first variant.
        assert_eq!(resolve(&cols, None).unwrap(), by_variant);
        assert_eq!(
            resolve(&cols, Some("spec=on")).unwrap().pairs,
            vec![(0, 1), (2, 3)]
        );
    }

    #[test]
    fn a_host_baseline_pairs_the_same_variant_across_hosts() {
        let cols = columns(&["a/spec=off", "a/spec=on", "b/spec=off", "b/spec=on"]);
        assert_eq!(resolve(&cols, Some("a")).unwrap().pairs, vec![(2, 0), (3, 1)]);
        assert_eq!(
            resolve(&cols, Some("b/spec=on")).unwrap().pairs,
            vec![(0, 3), (1, 3), (2, 3)]
        );
    }

    #[test]
    fn a_variant_baseline_keeps_the_other_axes() {
        let cols = columns(&[
            "a/spec=off,tp=4",
            "a/spec=on,tp=4",
            "a/spec=off,tp=8",
            "a/spec=on,tp=8",
        ]);
        assert_eq!(
            resolve(&cols, Some("spec=off")).unwrap().pairs,
            vec![(1, 0), (3, 2)]
        );
        let err = resolve(&cols, Some("spec=maybe")).unwrap_err().to_string();
        assert!(err.contains("no such host, column or variant"), "{err}");
    }
}
