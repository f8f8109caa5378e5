//! A host's `slurm:` block: the host is an allocation on a Slurm cluster, reached through the
//! login node that the rest of its entry describes (address, user, keys, ProxyJump as for SSH).

use serde::{Deserialize, Serialize};

use super::duration::Dur;
use super::template::shell_quote;

/// What to ask Slurm for. One node, always: a host is one machine.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SlurmSpec {
    /// The allocation's time limit: the last guard should rigrun lose touch with the cluster.
    pub time: Dur,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `--gpus=N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// `--gres=...` (`gpu:h100:4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// More `sbatch` options, one word each (`--qos=high`, `--exclusive`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
}

impl SlurmSpec {
    /// The `sbatch` options that ask for the allocation, each word shell-quoted.
    pub fn sbatch_options(&self) -> Vec<String> {
        let mut words = vec![
            "--nodes=1".to_string(),
            "--ntasks=1".to_string(),
            format!("--time={}", slurm_time(self.time.0)),
        ];
        let named = [
            ("--partition", self.partition.clone()),
            ("--account", self.account.clone()),
            ("--gpus", self.gpus.map(|n| n.to_string())),
            ("--gres", self.gres.clone()),
            ("--constraint", self.constraint.clone()),
        ];
        words.extend(
            named
                .into_iter()
                .filter_map(|(flag, value)| Some(format!("{flag}={}", value?))),
        );
        words.extend(self.extra.iter().cloned());
        words.iter().map(|w| shell_quote(w)).collect()
    }

    /// What is wrong with it, for the config's checks.
    pub fn problem(&self) -> Option<String> {
        if self.time.0.as_secs() < 60 {
            return Some(format!(
                "`slurm.time` is {}, shorter than Slurm's smallest limit (1 minute); write it like 2h",
                self.time
            ));
        }
        let empty = [&self.partition, &self.account, &self.gres, &self.constraint];
        if empty
            .iter()
            .any(|v| v.as_deref().is_some_and(|s| s.trim().is_empty()))
        {
            return Some("a `slurm:` value is empty: leave the key out instead".into());
        }
        if self.gpus == Some(0) {
            return Some("`slurm.gpus` is 0: leave it out for an allocation without GPUs".into());
        }
        self.extra
            .iter()
            .find(|w| !w.starts_with('-'))
            .map(|w| format!("`slurm.extra` holds `{w}`, which is not an sbatch option (each entry is one, like --qos=high)"))
    }
}

/// A duration as Slurm's `--time` takes it: `days-hours:minutes:seconds`.
fn slurm_time(time: std::time::Duration) -> String {
    let s = time.as_secs();
    format!(
        "{}-{:02}:{:02}:{:02}",
        s / 86_400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: serde_json::Value) -> SlurmSpec {
        serde_json::from_value(yaml).unwrap()
    }

    #[test]
    fn options_say_every_key_quoted() {
        let s = spec(serde_json::json!({
            "time": "1h30m", "partition": "gpu", "gpus": 2, "constraint": "h100&nvlink",
            "extra": ["--qos=high", "--comment=a b"]
        }));
        assert_eq!(
            s.sbatch_options().join(" "),
            "--nodes=1 --ntasks=1 --time=0-01:30:00 --partition=gpu --gpus=2 \
             '--constraint=h100&nvlink' --qos=high '--comment=a b'"
        );
        assert_eq!(s.problem(), None);
    }

    #[test]
    fn slurm_time_counts_days() {
        assert_eq!(
            slurm_time(std::time::Duration::from_secs(2 * 86_400 + 3661)),
            "2-01:01:01"
        );
    }

    #[test]
    fn problems_are_named() {
        let short = spec(serde_json::json!({"time": "30s"}));
        assert!(short.problem().unwrap().contains("1 minute"));
        let word = spec(serde_json::json!({"time": "1h", "extra": ["high"]}));
        assert!(word.problem().unwrap().contains("`high`"));
        let zero = spec(serde_json::json!({"time": "1h", "gpus": 0}));
        assert!(zero.problem().unwrap().contains("gpus"));
    }
}
