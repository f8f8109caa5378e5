//! Host facts, gathered in one round trip when a host connects and kept in the manifest, so that
//! every table can say what it measured: the machine (CPU, memory, kernel, OS), its GPUs
//! (`nvidia-smi --query-gpu`) and how they are linked (`nvidia-smi topo -m`). A missing tool is
//! recorded as absent, never an error; only `home` is required.

use anyhow::{bail, Result};
use serde_json::{json, Map, Value as Json};

use crate::transport::Transport;

/// One command that prints `key<TAB>value` lines; a missing tool prints nothing for its key.
const FACTS_COMMAND: &str = r#"printf 'home\t%s\n' "$HOME"
printf 'hostname\t%s\n' "$(uname -n)"
printf 'kernel\t%s\n' "$(uname -sr)"
printf 'arch\t%s\n' "$(uname -m)"
if [ -r /etc/os-release ]; then
  os=$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-$NAME}")
  [ -n "$os" ] && printf 'os\t%s\n' "$os"
fi
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2-)
[ -n "$cpu" ] && printf 'cpu\t%s\n' "$(echo $cpu)"
printf 'cpus\t%s\n' "$(getconf _NPROCESSORS_ONLN 2>/dev/null)"
mem=$(grep -m1 MemTotal /proc/meminfo 2>/dev/null | tr -s ' ' | cut -d' ' -f2)
[ -n "$mem" ] && printf 'memory_kib\t%s\n' "$mem"
if command -v nvidia-smi >/dev/null 2>&1; then
  if q=$(nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader 2>&1); then
    printf 'nvidia_smi\tpresent\n'
    printf '%s\n' "$q" | while IFS= read -r g; do [ -n "$g" ] && printf 'gpu\t%s\n' "$g"; done
    nvidia-smi topo -m 2>/dev/null | while IFS= read -r t; do printf 'topo\t%s\n' "$t"; done
  else
    printf 'nvidia_smi\tfailed: %s\n' "$(printf '%s' "$q" | head -n1)"
  fi
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

/// `key<TAB>value` lines into an object: repeated `gpu` lines become a list of GPUs, `topo`
/// lines the topology matrix and a one-line summary of how the GPUs are linked.
pub fn parse(out: &str) -> Json {
    let mut facts = Map::new();
    let mut gpus = Vec::new();
    let mut topo = Vec::new();
    for line in out.lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        match key {
            "gpu" => gpus.push(gpu(value.trim())),
            "topo" => topo.push(strip_ansi(value.trim_end())),
            "cpus" | "memory_kib" => {
                if let Ok(n) = value.trim().parse::<u64>() {
                    facts.insert(key.into(), n.into());
                }
            }
            _ => {
                facts.insert(key.into(), value.trim().into());
            }
        }
    }
    if !gpus.is_empty() {
        facts.insert("gpu_count".into(), gpus.len().into());
        facts.insert("gpus".into(), Json::Array(gpus));
    }
    let matrix = topology_matrix(&topo);
    if !matrix.is_empty() {
        if let Some(summary) = interconnect(&matrix) {
            facts.insert("gpu_interconnect".into(), summary.into());
        }
        facts.insert("gpu_topology".into(), matrix.join("\n").into());
    }
    Json::Object(facts)
}

/// One `--query-gpu` CSV line: `name, memory.total, driver_version, power.limit`. The name is
/// everything before the last three fields, in case it holds a comma.
fn gpu(line: &str) -> Json {
    let mut fields: Vec<&str> = line.rsplitn(4, ',').map(str::trim).collect();
    fields.reverse();
    match fields.as_slice() {
        [name, memory, driver, power] => json!({
            "name": name, "memory": memory, "driver": driver, "power_limit": power,
        }),
        _ => json!({ "name": line }),
    }
}

/// nvidia-smi underlines the header on some versions, even into a pipe.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for end in chars.by_ref() {
                if end.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The matrix part of `nvidia-smi topo -m` (the legend that follows it says nothing per host).
fn topology_matrix(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with("Legend"))
        .cloned()
        .collect()
}

/// PCIe paths from the shortest to the longest, as the legend of `nvidia-smi topo -m` lists them.
const PCIE_PATHS: &[&str] = &["PIX", "PXB", "PHB", "NODE", "SYS"];

/// How the GPUs talk to each other, in a line: NVLink between all of them, some of them, or
/// none (then the longest PCIe path, which all-reduces cross).
fn interconnect(matrix: &[String]) -> Option<String> {
    let header: Vec<&str> = matrix.first()?.split('\t').map(str::trim).collect();
    let gpu_columns: Vec<usize> = (0..header.len()).filter(|&i| is_gpu(header[i])).collect();
    let mut links: Vec<String> = Vec::new();
    for row in &matrix[1..] {
        let cells: Vec<&str> = row.split('\t').map(str::trim).collect();
        if !cells.first().is_some_and(|c| is_gpu(c)) {
            continue;
        }
        for &i in &gpu_columns {
            match cells.get(i) {
                Some(&"X") | None => {}
                Some(link) => links.push(link.to_string()),
            }
        }
    }
    if links.is_empty() {
        return (gpu_columns.len() == 1).then(|| "single GPU".to_string());
    }
    let nvlink: Vec<&String> = links.iter().filter(|l| l.starts_with("NV")).collect();
    let longest_pcie = PCIE_PATHS.iter().rev().find(|p| links.iter().any(|l| l == *p));
    let mut kinds: Vec<&str> = nvlink.iter().map(|s| s.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    Some(
        match (nvlink.len() == links.len(), nvlink.is_empty(), longest_pcie) {
            (true, _, _) => format!("NVLink between all GPUs ({})", kinds.join(", ")),
            (false, false, Some(p)) => {
                format!(
                    "NVLink between some GPUs ({}); the others over PCIe (up to {p})",
                    kinds.join(", ")
                )
            }
            (false, true, Some(p)) => format!("no NVLink: GPUs talk over PCIe (up to {p})"),
            _ => format!("GPU links: {}", links.join(", ")),
        },
    )
}

fn is_gpu(name: &str) -> bool {
    name.strip_prefix("GPU")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from a 2× RTX A6000 box with an NVLink bridge (driver 570).
    const TOPO_NVLINK: &str = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV4\t0-23\t0\t\tN/A\nGPU1\tNV4\t X \t0-23\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n  NV#  = Connection traversing a bonded set of # NVLinks\n";

    /// An 8-GPU box without NVLink: every pair over PCIe, half of them across the sockets.
    const TOPO_PCIE: &str = "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNODE\tSYS\tSYS\tPIX\t0-31\t0\nGPU1\tNODE\t X \tSYS\tSYS\tNODE\t0-31\t0\nGPU2\tSYS\tSYS\t X \tNODE\tSYS\t32-63\t1\nGPU3\tSYS\tSYS\tNODE\t X \tSYS\t32-63\t1\nNIC0\tPIX\tNODE\tSYS\tSYS\t X \t\t\n\nLegend:\n";

    fn topo_lines(text: &str) -> String {
        text.lines().map(|l| format!("topo\t{l}\n")).collect()
    }

    #[test]
    fn parses_lines_and_gpus() {
        let out = "home\t/root\narch\tx86_64\ncpus\t64\nnvidia_smi\tpresent\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\n";
        let f = parse(out);
        assert_eq!(f["home"], "/root");
        assert_eq!(f["cpus"], 64);
        assert_eq!(f["gpu_count"], 2);
        assert_eq!(f["gpus"][0]["name"], "NVIDIA RTX A6000");
        assert_eq!(f["gpus"][0]["memory"], "49140 MiB");
        assert_eq!(f["gpus"][0]["driver"], "570.86");
        assert_eq!(f["gpus"][1]["power_limit"], "300.00 W");
    }

    #[test]
    fn summarizes_the_topology() {
        let f = parse(&topo_lines(TOPO_NVLINK));
        assert_eq!(f["gpu_interconnect"], "NVLink between all GPUs (NV4)");
        let matrix = f["gpu_topology"].as_str().unwrap();
        assert!(
            matrix.starts_with("\tGPU0\tGPU1") && !matrix.contains("Legend"),
            "{matrix}"
        );
        let f = parse(&topo_lines(TOPO_PCIE));
        assert_eq!(
            f["gpu_interconnect"],
            "no NVLink: GPUs talk over PCIe (up to SYS)"
        );
        let mixed = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV18\tSYS\nGPU1\tNV18\t X \tSYS\nGPU2\tSYS\tSYS\t X \n";
        assert_eq!(
            parse(&topo_lines(mixed))["gpu_interconnect"],
            "NVLink between some GPUs (NV18); the others over PCIe (up to SYS)"
        );
        let underlined = "topo\t\u{1b}[4m\tGPU0\tCPU Affinity\u{1b}[0m\ntopo\tGPU0\t X \t0-7\n";
        assert_eq!(parse(underlined)["gpu_interconnect"], "single GPU");
    }

    #[test]
    fn a_missing_or_failing_nvidia_smi_is_recorded() {
        assert_eq!(parse("nvidia_smi\tabsent\n")["nvidia_smi"], "absent");
        let f = parse("nvidia_smi\tfailed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n");
        assert!(f["nvidia_smi"]
            .as_str()
            .unwrap()
            .starts_with("failed: NVIDIA-SMI"));
        assert!(f.get("gpus").is_none());
    }

    #[tokio::test]
    async fn gathers_facts_on_this_machine() {
        let t = Transport::Local(crate::transport::LocalTransport::new());
        let f = gather(&t).await.unwrap();
        assert_eq!(f["home"].as_str().unwrap(), std::env::var("HOME").unwrap());
        assert_eq!(f["arch"].as_str().unwrap(), std::env::consts::ARCH);
        assert!(f["nvidia_smi"].is_string());
    }
}
