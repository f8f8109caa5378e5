//! Goodput, as vLLM's `bench serve --goodput` has it: the requests per second that met every
//! latency limit, judged per request rather than per percentile. `--slo` names the limits as
//! the report does (`p99_ttft_ms=2000,median_tpot_ms=50`); per request only the latency counts
//! (TTFT, TPOT, end-to-end latency), so a limit on any statistic of one (`p99_ttft_ms`,
//! `median_ttft_ms`, `ttft_ms`) bounds that latency of every request, the strictest winning.

use std::time::Duration;

use crate::config::slo::{Slo, SLO_ENV};

/// The limits a playbook hands this bench through `RIGRUN_SLO` (see [`Goodput::of_playbook`]).
pub fn from_env() -> Option<Goodput> {
    std::env::var(SLO_ENV)
        .ok()
        .and_then(|text| Goodput::of_playbook(&text))
}

/// Per-request latency limits; none stated is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Goodput {
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub e2el: Option<Duration>,
}

/// One request's latencies, where measured (TTFT and TPOT need a stream).
#[derive(Clone, Copy, Debug, Default)]
pub struct Latencies {
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub e2el: Duration,
}

impl Goodput {
    /// The per-request limits of `slo`; an error naming a metric that is no request latency.
    pub fn from_slo(slo: &Slo) -> Result<Goodput, String> {
        match Goodput::limits_of(slo) {
            (g, others) if others.is_empty() => Ok(g),
            (_, others) => Err(format!(
                "--slo {}: goodput judges each request's latency: name a ttft, tpot or e2el \
                 metric in ms (e.g. p99_ttft_ms=2000)",
                others[0]
            )),
        }
    }

    /// The limits of `slo` on a request's latencies, the strictest per latency, and the metrics
    /// that are no request's latency.
    fn limits_of(slo: &Slo) -> (Goodput, Vec<&str>) {
        let (mut g, mut others) = (Goodput::default(), Vec::new());
        for (metric, &ms) in &slo.limits {
            let slot = match metric.as_str() {
                m if m.contains("ttft") => &mut g.ttft,
                m if m.contains("tpot") => &mut g.tpot,
                m if m.contains("e2el") => &mut g.e2el,
                m => {
                    others.push(m);
                    continue;
                }
            };
            let limit = Duration::from_secs_f64(ms / 1000.0);
            *slot = Some(slot.map_or(limit, |l| l.min(limit)));
        }
        (g, others)
    }

    /// The limits of the playbook that runs this bench (`RIGRUN_SLO`), when it states any: the
    /// latency limits among them (the others cannot be judged per request and are left to the
    /// report, said on stderr). None without the variable, or with nothing to judge.
    fn of_playbook(text: &str) -> Option<Goodput> {
        let slo = match Slo::parse(text) {
            Ok(slo) => slo,
            Err(why) => {
                eprintln!("rigrun bench: ignoring {SLO_ENV}={text}: {why}");
                return None;
            }
        };
        let (goodput, others) = Goodput::limits_of(&slo);
        if !others.is_empty() {
            eprintln!(
                "rigrun bench: goodput by the playbook's slo: without {} (not a request's latency)",
                others.join(", ")
            );
        }
        (goodput != Goodput::default()).then_some(goodput)
    }

    /// Whether a request met every limit; one whose limited latency was not measured (TPOT of a
    /// one-token answer, TTFT without a stream) did not.
    pub fn met_by(&self, request: &Latencies) -> bool {
        let within = |limit: Option<Duration>, value: Option<Duration>| match limit {
            None => true,
            Some(l) => value.is_some_and(|v| v <= l),
        };
        within(self.ttft, request.ttft)
            && within(self.tpot, request.tpot)
            && within(self.e2el, Some(request.e2el))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_playbooks_limits_judge_latencies_and_leave_the_rest() {
        let g = Goodput::of_playbook("p99_ttft_ms=2000,output_throughput=5,median_tpot_ms=50").unwrap();
        assert_eq!(g.ttft, Some(Duration::from_secs(2)));
        assert_eq!(g.tpot, Some(Duration::from_millis(50)));
        assert_eq!(g.e2el, None);
        assert_eq!(
            Goodput::of_playbook("output_throughput=5"),
            None,
            "nothing per request"
        );
        assert_eq!(Goodput::of_playbook("garbage"), None);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn limits_bound_each_requests_latency_the_strictest_winning() {
        let slo = Slo::parse("p99_ttft_ms=2000,median_ttft_ms=500,mean_tpot_ms=50").unwrap();
        let g = Goodput::from_slo(&slo).unwrap();
        assert_eq!((g.ttft, g.tpot, g.e2el), (Some(ms(500)), Some(ms(50)), None));
        let good = Latencies {
            ttft: Some(ms(500)),
            tpot: Some(ms(20)),
            e2el: ms(9000),
        };
        assert!(g.met_by(&good), "bounds are inclusive");
        assert!(!g.met_by(&Latencies {
            ttft: Some(ms(501)),
            ..good
        }));
        assert!(
            !g.met_by(&Latencies { tpot: None, ..good }),
            "not measured is not met"
        );
    }

    #[test]
    fn a_limit_on_no_request_latency_is_refused() {
        let err = Goodput::from_slo(&Slo::parse("output_throughput=100").unwrap()).unwrap_err();
        assert!(
            err.starts_with("--slo output_throughput: goodput judges each request's latency"),
            "{err}"
        );
    }
}
