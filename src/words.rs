//! How human output counts things: `1 host`, `2 hosts`, `10,000 points`. Ground floor: imports
//! nothing of rigrun.

/// `n` and the noun in the form that goes with it: `count(1, "host")` is `1 host`,
/// `count(2, "host")` is `2 hosts`.
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {}", noun_for(n, noun))
}

/// The noun alone, in the form that goes with `n`: `repetition`, `repetitions`; a noun
/// ending in `s`, `x` or `ch` takes `es`.
pub fn noun_for(n: usize, noun: &str) -> String {
    if n == 1 {
        return noun.to_string();
    }
    match noun {
        n if n.ends_with('s') || n.ends_with('x') || n.ends_with("ch") => format!("{n}es"),
        n => format!("{n}s"),
    }
}

/// `10000000` as `10,000,000`.
pub fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_everything_else_plural() {
        assert_eq!(count(1, "host"), "1 host");
        assert_eq!(count(0, "host"), "0 hosts");
        assert_eq!(count(2, "sweep point"), "2 sweep points");
        assert_eq!(count(3, "pass"), "3 passes");
        assert_eq!(count(1, "space"), "1 space");
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(10_000_000), "10,000,000");
    }
}
