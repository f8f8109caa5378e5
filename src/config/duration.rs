//! Durations as people write them in playbooks: `90s`, `10m`, `1h30m`, or a bare number of seconds.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration read from YAML; serialises back as the humane string (`10m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn parse(text: &str) -> Result<Dur, String> {
        let text = text.trim();
        if let Ok(secs) = text.parse::<u64>() {
            return Ok(Dur(Duration::from_secs(secs)));
        }
        humantime::parse_duration(text)
            .map(Dur)
            .map_err(|e| format!("`{text}` is not a duration ({e}); write it like 90s, 10m or 1h"))
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DurVisitor;
        impl Visitor<'_> for DurVisitor {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 90s, 10m or 1h")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|v| Dur(Duration::from_secs(v)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                Dur::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(DurVisitor)
    }
}

/// A step's `timeout:` (`deserialize_with`): a duration above zero, or absent for none. A zero
/// timeout would fail every run of the step the moment it starts, so it is refused where it is
/// written.
pub fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
    match Option::<Dur>::deserialize(d)? {
        Some(Dur(limit)) if limit.is_zero() => Err(de::Error::custom(
            "a timeout of 0s would stop the step before it does anything; give it the time it needs, like 30m, or leave timeout: out for no limit",
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_forms_people_write() {
        assert_eq!(Dur::parse("90s").unwrap().0, Duration::from_secs(90));
        assert_eq!(Dur::parse("10m").unwrap().0, Duration::from_secs(600));
        assert_eq!(Dur::parse("1h").unwrap().0, Duration::from_secs(3600));
        assert_eq!(Dur::parse("1h30m").unwrap().0, Duration::from_secs(5400));
        assert_eq!(Dur::parse("45").unwrap().0, Duration::from_secs(45));
        assert_eq!(Dur::parse("250ms").unwrap().0, Duration::from_millis(250));
    }

    #[test]
    fn rejects_nonsense_with_a_hint() {
        let err = Dur::parse("ten minutes").unwrap_err();
        assert!(err.contains("90s, 10m or 1h"), "{err}");
        assert!(Dur::parse("-5m").is_err());
    }

    #[test]
    fn a_zero_timeout_is_refused() {
        #[derive(Debug, Deserialize)]
        struct Step {
            #[serde(default, deserialize_with = "timeout")]
            timeout: Option<Dur>,
        }
        let read = |yaml: &str| serde_saphyr::from_str::<Step>(yaml).map(|s| s.timeout);
        assert_eq!(read("timeout: 90s").unwrap(), Some(Dur(Duration::from_secs(90))));
        assert_eq!(read("{}").unwrap(), None);
        for zero in ["timeout: 0s", "timeout: 0", "timeout: 0ms"] {
            let err = read(zero).unwrap_err().to_string();
            assert!(
                err.contains("a timeout of 0s would stop the step"),
                "{zero}: {err}"
            );
        }
    }

    #[test]
    fn prints_back_humanely() {
        assert_eq!(Dur::parse("10m").unwrap().to_string(), "10m");
    }
}
