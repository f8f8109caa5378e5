//! Facts, typed: what a host is (gathered in one round trip when it connects: the machine's CPU,
//! memory, kernel and OS, its boot id, its GPUs from `nvidia-smi --query-gpu` and how they are
//! linked from `nvidia-smi topo -m`) and what its inference server says of itself. They are kept in the
//! manifest, so that every table can say what it measured, and read back by the progress display
//! and the reports under these names. A missing tool is recorded as absent, never an error.
//!
//! A ground floor: it imports nothing of rigrun; the executor runs [`COMMAND`] on the host.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// What a host is. Serialized under the same keys as the untyped facts of earlier releases, so
/// their run directories still load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostFacts {
    /// The login directory (`~/` paths resolve against it); the only fact required.
    pub home: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `uname -sr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// `uname -m`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// The C library: `glibc 2.36` (`getconf GNU_LIBC_VERSION`), or `musl libc (x86_64)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub libc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_kib: Option<u64>,
    /// `present`, `absent`, or `failed: <what it said>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia_smi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Gpu>,
    /// Where `gpus` came from when not from nvidia-smi: `DCGM exporter <url>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_source: Option<String>,
    /// One line: NVLink between all, some or none of the GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_interconnect: Option<String>,
    /// The matrix of `nvidia-smi topo -m`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_topology: Option<String>,
    /// Linux's `/proc/sys/kernel/random/boot_id`: new at every boot, so a changed one says the
    /// host rebooted (and what ran there is gone). Absent in runs from before it was gathered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// On a Slurm host: the allocation these facts were read in (the node's facts, not the
    /// login node's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
}

/// A Slurm allocation that a host is: its job, its node and the login node it was asked from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub job_id: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_node: Option<String>,
}

impl HostFacts {
    /// The host in one line, as `check --connect` prints it: `x86_64, Ubuntu 22.04.4 LTS,
    /// Linux 6.8.0, 64 CPUs, 251 GiB, 8 GPUs (NVIDIA H100 80GB HBM3, driver 570.86)`.
    pub fn one_line(&self) -> String {
        let memory = self.memory_kib.map(|k| format!("{} GiB", k / (1024 * 1024)));
        let gpus = match (self.gpu_count, self.gpus.first(), self.nvidia_smi.as_deref()) {
            (Some(n), Some(gpu), _) => Some(format!(
                "{n} GPU{} ({}{})",
                if n == 1 { "" } else { "s" },
                gpu.name,
                gpu.driver
                    .as_ref()
                    .map(|d| format!(", driver {d}"))
                    .unwrap_or_default()
            )),
            (_, _, Some(smi)) if smi != "present" => Some(format!("nvidia-smi {smi}")),
            _ => None,
        };
        let parts = [
            self.arch.clone(),
            self.os.clone(),
            self.kernel.clone(),
            self.cpus.map(|n| format!("{n} CPUs")),
            memory,
            gpus,
        ];
        parts.into_iter().flatten().collect::<Vec<_>>().join(", ")
    }
}

/// One GPU as `nvidia-smi --query-gpu` lists it (fields as it prints them, units included).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "GpuEntry")]
pub struct Gpu {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<String>,
}

/// A GPU as stored: its fields, or (runs from before GPUs were parsed) the CSV line nvidia-smi
/// printed, of which the name is the first field.
#[derive(Deserialize)]
#[serde(untagged)]
enum GpuEntry {
    Line(String),
    Fields {
        name: String,
        memory: Option<String>,
        driver: Option<String>,
        power_limit: Option<String>,
    },
}

impl From<GpuEntry> for Gpu {
    fn from(entry: GpuEntry) -> Gpu {
        match entry {
            GpuEntry::Line(line) => Gpu {
                name: line.split(',').next().unwrap_or_default().to_string(),
                ..Gpu::default()
            },
            GpuEntry::Fields {
                name,
                memory,
                driver,
                power_limit,
            } => Gpu {
                name,
                memory,
                driver,
                power_limit,
            },
        }
    }
}

/// What an inference server says of itself (verify-server asks `/v1/models`, vLLM's `/version`,
/// SGLang's `/get_server_info`, llama.cpp's `/props`); part of its [`ServerReply`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerFacts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How the server was launched, as it reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_args: Option<serde_json::Map<String, Json>>,
    /// Per endpoint asked: `ok` or `absent (why)`.
    pub endpoints: IndexMap<String, String>,
}

/// What a host's inference server said of itself when rigrun checked it, at a `verify-server`
/// step or as a server variant became ready: the models it serves, their context length and
/// its [`ServerFacts`]. Both write these keys among the step's details (the variant's
/// startup), where run.json has always kept them; [`ServerReply::within`] reads them back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerReply {
    pub models: Vec<String>,
    pub max_model_len: Option<u64>,
    /// Absent in runs from before rigrun asked, or when what it wrote cannot be read.
    pub facts: Option<ServerFacts>,
}

impl ServerReply {
    /// The reply `details` hold, if they hold one: `models` beside `max_model_len`, which only
    /// a server's check writes (start-server's details name the models alone).
    pub fn within(details: &Json) -> Option<ServerReply> {
        let models = details.get("models")?.as_array()?;
        let max_model_len = details.get("max_model_len")?.as_u64();
        let facts = details.get("server_facts").filter(|f| f.is_object());
        Some(ServerReply {
            models: models
                .iter()
                .filter_map(Json::as_str)
                .map(str::to_string)
                .collect(),
            max_model_len,
            facts: facts.and_then(|f| serde_json::from_value(f.clone()).ok()),
        })
    }
}

/// The line [`COMMAND`] prints first: whatever a host printed before it (a login shell's banner
/// or rc file output, even without a newline of its own) is not read as facts.
pub const START: &str = "__rigrun_facts__";

/// One command that prints `key<TAB>value` lines after [`START`]; a missing tool prints nothing
/// for its key.
pub const COMMAND: &str = r#"printf '%s\n' __rigrun_facts__
printf 'home\t%s\n' "$HOME"
u=$(uname -snrm); s=${u%% *}; u=${u#* }; n=${u%% *}; u=${u#* }; r=${u%% *}; m=${u##* }
printf 'hostname\t%s\n' "$n"
printf 'kernel\t%s %s\n' "$s" "$r"
printf 'arch\t%s\n' "$m"
libc=$(getconf GNU_LIBC_VERSION 2>/dev/null) || libc=$(ldd --version 2>&1 | head -n1)
[ -n "$libc" ] && printf 'libc\t%s\n' "$libc"
[ -r /proc/sys/kernel/random/boot_id ] && read -r b < /proc/sys/kernel/random/boot_id && printf 'boot_id\t%s\n' "$b"
if [ -r /etc/os-release ]; then
  os=$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-$NAME}")
  [ -n "$os" ] && printf 'os\t%s\n' "$os"
fi
cpu=; [ -r /proc/cpuinfo ] && while IFS= read -r l; do
  case $l in 'model name'*) cpu=${l#*:}; break;; '') break;; esac
done < /proc/cpuinfo
[ -n "$cpu" ] && printf 'cpu\t%s\n' "$(echo $cpu)"
printf 'cpus\t%s\n' "$(getconf _NPROCESSORS_ONLN 2>/dev/null)"
mem=; [ -r /proc/meminfo ] && read -r _ mem _ < /proc/meminfo
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

/// What [`COMMAND`] printed, as facts: repeated `gpu` lines become the list of GPUs, `topo`
/// lines the topology matrix and a one-line summary of how the GPUs are linked. Only what follows
/// the [`START`] line is read, when there is one. Fails when the host reported no home directory.
pub fn parse(out: &str) -> Result<HostFacts, String> {
    let mut facts = HostFacts::default();
    let mut topo = Vec::new();
    let out = out
        .split_once(&format!("{START}\n"))
        .map_or(out, |(_, facts)| facts);
    for line in out.lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        let text = || Some(value.trim().to_string());
        match key {
            "gpu" => facts.gpus.push(gpu(value.trim())),
            "topo" => topo.push(strip_ansi(value.trim_end())),
            "cpus" => facts.cpus = value.trim().parse().ok(),
            "memory_kib" => facts.memory_kib = value.trim().parse().ok(),
            "home" => facts.home = value.trim().to_string(),
            "hostname" => facts.hostname = text(),
            "kernel" => facts.kernel = text(),
            "arch" => facts.arch = text(),
            "os" => facts.os = text(),
            "libc" => facts.libc = text(),
            "cpu" => facts.cpu = text(),
            "nvidia_smi" => facts.nvidia_smi = text(),
            "boot_id" => facts.boot_id = text().filter(|id| !id.is_empty()),
            _ => {}
        }
    }
    if !facts.gpus.is_empty() {
        facts.gpu_count = Some(facts.gpus.len() as u64);
    }
    let matrix = topology_matrix(&topo);
    if !matrix.is_empty() {
        facts.gpu_interconnect = interconnect(&matrix);
        facts.gpu_topology = Some(matrix.join("\n"));
    }
    if facts.home.is_empty() {
        return Err("the host did not report its home directory ($HOME is empty)".into());
    }
    Ok(facts)
}

/// One `--query-gpu` CSV line: `name, memory.total, driver_version, power.limit`. The name is
/// everything before the last three fields, in case it holds a comma.
fn gpu(line: &str) -> Gpu {
    let mut fields: Vec<&str> = line.rsplitn(4, ',').map(str::trim).collect();
    fields.reverse();
    match fields.as_slice() {
        [name, memory, driver, power] => Gpu {
            name: name.to_string(),
            memory: Some(memory.to_string()),
            driver: Some(driver.to_string()),
            power_limit: Some(power.to_string()),
        },
        _ => Gpu {
            name: line.to_string(),
            ..Gpu::default()
        },
    }
}

/// nvidia-smi underlines the header on some versions, even into a pipe.
fn strip_ansi(text: &str) -> String {
    console::strip_ansi_codes(text).into_owned()
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

    /// Facts from `lines`, with a home directory.
    fn parsed(lines: &str) -> HostFacts {
        parse(&format!("home\t/root\n{lines}")).unwrap()
    }

    #[test]
    fn what_came_before_the_start_line_is_not_read() {
        assert!(COMMAND.starts_with(&format!("printf '%s\\n' {START}\n")));
        let noisy = format!("home\t/banner\ngpu\tFake, 1 MiB, 1, 1 W\nno newline{START}\nhome\t/root\n");
        let facts = parse(&noisy).unwrap();
        assert_eq!(facts.home, "/root");
        assert!(facts.gpus.is_empty(), "{facts:?}");
    }

    #[test]
    fn parses_lines_and_gpus() {
        let out = "arch\tx86_64\ncpus\t64\nnvidia_smi\tpresent\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\ngpu\tNVIDIA RTX A6000, 49140 MiB, 570.86, 300.00 W\n";
        let f = parsed(out);
        assert_eq!(f.home, "/root");
        assert_eq!(f.cpus, Some(64));
        assert_eq!(f.gpu_count, Some(2));
        assert_eq!(f.gpus[0].name, "NVIDIA RTX A6000");
        assert_eq!(f.gpus[0].memory.as_deref(), Some("49140 MiB"));
        assert_eq!(f.gpus[0].driver.as_deref(), Some("570.86"));
        assert_eq!(f.gpus[1].power_limit.as_deref(), Some("300.00 W"));
        assert!(parse("arch\tx86_64\n").unwrap_err().contains("home directory"));
    }

    #[test]
    fn summarizes_the_topology() {
        let f = parsed(&topo_lines(TOPO_NVLINK));
        assert_eq!(
            f.gpu_interconnect.as_deref(),
            Some("NVLink between all GPUs (NV4)")
        );
        let matrix = f.gpu_topology.unwrap();
        assert!(
            matrix.starts_with("\tGPU0\tGPU1") && !matrix.contains("Legend"),
            "{matrix}"
        );
        let f = parsed(&topo_lines(TOPO_PCIE));
        assert_eq!(
            f.gpu_interconnect.as_deref(),
            Some("no NVLink: GPUs talk over PCIe (up to SYS)")
        );
        let mixed = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV18\tSYS\nGPU1\tNV18\t X \tSYS\nGPU2\tSYS\tSYS\t X \n";
        assert_eq!(
            parsed(&topo_lines(mixed)).gpu_interconnect.as_deref(),
            Some("NVLink between some GPUs (NV18); the others over PCIe (up to SYS)")
        );
        let underlined = "topo\t\u{1b}[4m\tGPU0\tCPU Affinity\u{1b}[0m\ntopo\tGPU0\t X \t0-7\n";
        assert_eq!(parsed(underlined).gpu_interconnect.as_deref(), Some("single GPU"));
    }

    #[test]
    fn a_missing_or_failing_nvidia_smi_is_recorded() {
        assert_eq!(
            parsed("nvidia_smi\tabsent\n").nvidia_smi.as_deref(),
            Some("absent")
        );
        let f = parsed("nvidia_smi\tfailed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n");
        assert!(f.nvidia_smi.unwrap().starts_with("failed: NVIDIA-SMI"));
        assert!(f.gpus.is_empty());
    }

    #[test]
    fn facts_keep_the_keys_of_earlier_releases() {
        let f = parsed("hostname\tbox\ncpus\t8\nnvidia_smi\tpresent\ngpu\tNVIDIA A100, 80 GB, 550, 400 W\n");
        let json = serde_json::to_value(&f).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["home", "hostname", "cpus", "nvidia_smi", "gpu_count", "gpus"]
        );
        assert_eq!(json["gpus"][0]["power_limit"], "400 W");
        // A GPU stored as nvidia-smi's line reads back with its name.
        let old: HostFacts =
            serde_json::from_str(r#"{"home": "/h", "gpus": ["NVIDIA A100, 80 GB"]}"#).unwrap();
        assert_eq!(old.gpus[0].name, "NVIDIA A100");
        assert_eq!(old.boot_id, None, "runs from before the boot id was gathered");
        assert_eq!(serde_json::from_value::<HostFacts>(json).unwrap(), f);
        let booted = parsed("boot_id\t6f1b3c2e-0d4a-4b1e-9a57-3c1d2e4f5a6b\n");
        let stored = serde_json::to_value(&booted).unwrap();
        assert_eq!(stored["boot_id"], "6f1b3c2e-0d4a-4b1e-9a57-3c1d2e4f5a6b");
        assert_eq!(serde_json::from_value::<HostFacts>(stored).unwrap(), booted);
    }

    #[test]
    fn the_command_runs_here() {
        let out = std::process::Command::new("sh")
            .args(["-c", COMMAND])
            .output()
            .unwrap();
        let f = parse(&String::from_utf8_lossy(&out.stdout)).unwrap();
        assert_eq!(f.home, std::env::var("HOME").unwrap());
        assert_eq!(f.arch.as_deref(), Some(std::env::consts::ARCH));
        assert!(f.nvidia_smi.is_some());
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(f.boot_id.as_deref(), Some(boot_id.trim()));
    }

    #[test]
    fn a_servers_reply_is_read_where_verify_server_and_a_variant_write_it() {
        let details = serde_json::json!({"url": "http://l:8000", "models": ["Qwen/Q"],
            "max_model_len": 4096, "server_facts": {"engine": "vllm", "version": "0.9.1"}});
        let reply = ServerReply::within(&details).unwrap();
        assert_eq!(
            (reply.models, reply.max_model_len),
            (vec!["Qwen/Q".to_string()], Some(4096))
        );
        assert_eq!(reply.facts.unwrap().engine.as_deref(), Some("vllm"));
        let older = serde_json::json!({"models": ["m"], "max_model_len": null});
        assert_eq!(ServerReply::within(&older).unwrap().facts, None);
        let start_server = serde_json::json!({"command": "serve", "models": ["m"]});
        assert_eq!(ServerReply::within(&start_server), None, "not a server's check");
        assert_eq!(ServerReply::within(&serde_json::json!({"url": "u"})), None);
    }
}
