//! Host facts, gathered in one round trip when a host connects and kept in the manifest, so that
//! every table can say what it measured.

use anyhow::{bail, Result};
use serde_json::{Map, Value as Json};

use crate::transport::Transport;

/// One command that prints `key<TAB>value` lines; a missing tool prints nothing for its key.
const FACTS_COMMAND: &str = r#"printf 'home\t%s\n' "$HOME"
printf 'hostname\t%s\n' "$(uname -n)"
printf 'kernel\t%s\n' "$(uname -sr)"
printf 'arch\t%s\n' "$(uname -m)"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2-)
[ -n "$cpu" ] && printf 'cpu\t%s\n' "$(echo $cpu)"
printf 'cpus\t%s\n' "$(getconf _NPROCESSORS_ONLN 2>/dev/null)"
mem=$(grep -m1 MemTotal /proc/meminfo 2>/dev/null | tr -s ' ' | cut -d' ' -f2)
[ -n "$mem" ] && printf 'memory_kib\t%s\n' "$mem"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader 2>/dev/null | while IFS= read -r g; do printf 'gpu\t%s\n' "$g"; done
else
  printf 'nvidia_smi\tabsent\n'
fi
"#;

/// Gathers the facts; `home` is required (paths like `~/.rigrun` resolve against it).
pub async fn gather(transport: &Transport) -> Result<Json> {
    let out = transport.output(FACTS_COMMAND).await?;
    let facts = parse(&out);
    if facts.get("home").and_then(Json::as_str).unwrap_or("").is_empty() {
        bail!("the host did not report its home directory ($HOME is empty)");
    }
    Ok(facts)
}

/// `key<TAB>value` lines into an object; repeated `gpu` lines become a list.
pub fn parse(out: &str) -> Json {
    let mut facts = Map::new();
    let mut gpus = Vec::new();
    for line in out.lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        let value = value.trim();
        match key {
            "gpu" => gpus.push(Json::from(value)),
            "cpus" | "memory_kib" => {
                if let Ok(n) = value.parse::<u64>() {
                    facts.insert(key.into(), n.into());
                }
            }
            _ => {
                facts.insert(key.into(), value.into());
            }
        }
    }
    if !gpus.is_empty() {
        facts.insert("gpu_count".into(), gpus.len().into());
        facts.insert("gpus".into(), Json::Array(gpus));
    }
    Json::Object(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_gpus() {
        let out = "home\t/root\narch\tx86_64\ncpus\t64\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\n";
        let f = parse(out);
        assert_eq!(f["home"], "/root");
        assert_eq!(f["cpus"], 64);
        assert_eq!(f["gpu_count"], 2);
        assert!(f["gpus"][0].as_str().unwrap().starts_with("NVIDIA RTX A6000"));
    }

    #[tokio::test]
    async fn gathers_facts_on_this_machine() {
        let t = Transport::Local(crate::transport::LocalTransport::new());
        let f = gather(&t).await.unwrap();
        assert_eq!(f["home"].as_str().unwrap(), std::env::var("HOME").unwrap());
        assert_eq!(f["arch"].as_str().unwrap(), std::env::consts::ARCH);
    }
}
