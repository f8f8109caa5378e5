//! GPU health over a real sshd: the host's `nvidia-smi` is a stand-in (these machines have no
//! GPU) answering the facts' query and the health query in nvidia-smi's format — two A100s,
//! GPU 1 reporting 3 uncorrected volatile ECC errors from the third health query on (the
//! snapshot before the sweep, point n=1's record, then point n=2's). Point n=2's record is
//! invalid with the reason, n=1 and n=3 are valid, `rigrun show` says so, and the step's details
//! keep the snapshots before and after the sweep.

use crate::common::*;
use serde_json::Value;

/// The stand-in; `COUNT` is replaced by the file counting its health queries.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
case "$*" in
  *--query-gpu=name,*)
    echo "NVIDIA A100-SXM4-80GB, 81920 MiB, 550.54.15, 400.00 W"
    echo "NVIDIA A100-SXM4-80GB, 81920 MiB, 550.54.15, 400.00 W" ;;
  *--query-gpu=index,uuid,*)
    n=$(( $(cat COUNT 2>/dev/null || echo 0) + 1 )); echo "$n" > COUNT
    e=0; [ "$n" -ge 3 ] && e=3
    echo "0, GPU-4a1f2c3d-0000-1111-2222-333344445555, 00000000:3B:00.0, 0, 0, No, 0, 0, No, No, 0"
    echo "1, GPU-9e8d7c6b-0000-1111-2222-333344445555, 00000000:86:00.0, $e, 0, No, [N/A], [N/A], No, No, 0" ;;
  *-lms*) exec sleep 600 ;;
  *) exit 1 ;;
esac
"#;

const PLAYBOOK: &str = r#"
name: gpu-health
steps:
  - run-sweep:
      matrix: {n: [1, 2, 3]}
      command: "printf '{\"value\": %s}\\n' {{ n }}"
"#;

#[test]
fn gpu_errors_during_a_point_make_its_record_invalid_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("nvidia-smi");
    let count = dir.join("health-queries");
    std::fs::write(&tool, FAKE_NVIDIA_SMI.replace("COUNT", count.to_str().unwrap())).unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = ClientKey::new(dir);
    let path = format!("SetEnv PATH={}:/usr/local/bin:/usr/bin:/bin\n", bin.display());
    let sshd = Sshd::start_with(dir, "g", &key, &|c| c + &path);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("g", &key, &known_hosts, &dir.join("work"), "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    std::fs::write(dir.join("p.yaml"), PLAYBOOK).unwrap();

    let out = run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "rigrun failed:\n{stdout}\n{stderr}");
    let said = "n=2: the GPUs erred while it ran (GPU 1: uncorrected ECC errors 0 → 3)";
    assert!(stderr.contains(said), "the notice:\n{stderr}");
    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);
    let of = |n: u64| {
        recs.iter()
            .find(|r| r["point"]["n"] == n)
            .unwrap_or_else(|| panic!("no record of n={n}: {recs:#?}"))
    };
    for n in [1, 3] {
        assert_eq!(of(n)["metrics"].get("valid"), None, "{}", of(n));
    }
    let m = &of(2)["metrics"];
    assert_eq!(m["valid"], false, "{m}");
    assert_eq!(
        m["problems"],
        serde_json::json!(["the GPUs erred while it ran: GPU 1: uncorrected ECC errors 0 → 3"])
    );
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().trim(),
        "5",
        "before, 3 records, after"
    );

    let health = &manifest(&run_dir)["hosts"]["g"]["steps"][0]["details"]["telemetry"]["gpu_health"];
    let gpu1 = |when: &str| health[when]["gpus"][1].clone();
    assert_eq!(gpu1("before")["ecc_uncorrected_volatile"], 0, "{health:#}");
    assert_eq!(gpu1("after")["ecc_uncorrected_volatile"], 3, "{health:#}");
    assert_eq!(
        gpu1("after")["retired_pages_sbe"],
        Value::Null,
        "[N/A] is unknown"
    );

    let show = run_rigrun(dir, &["show", run_dir.to_str().unwrap()]);
    let (table, _) = text(&show);
    assert!(
        table.contains("invalid: the GPUs erred while it ran: GPU 1: uncorrected ECC errors 0 → 3"),
        "show says why n=2 is invalid:\n{table}"
    );
}
