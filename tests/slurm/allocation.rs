//! A playbook that runs on an SSH host runs unchanged on a Slurm host beside it, and what Slurm
//! refuses, or could never give, is said in its words.

use std::time::Duration;

use crate::common::{assert_none_left, free_port, manifest, records, run_rigrun, text};
use crate::resume_support::{spawn, wait_for_event};
use crate::{allocation_of, login_node, notices, Cluster};

/// A server started by the playbook on each host, on a loopback address, then a sweep whose
/// records say the Slurm job and step they ran in: on the Slurm host every command ran inside its
/// allocation (a step of the job the run asked for), on the SSH host none did; the allocation is
/// given back and the servers are gone when the run ends. The Slurm host's server listens on
/// 127.0.0.2, which only a connection made on the node reaches (the login node here is the same
/// machine: its own loopback is 127.0.0.1 under the node's name).
#[test]
fn a_sweep_runs_in_the_allocation_beside_an_ssh_host() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let ports = [free_port(), free_port()];
    let vars = [
        format!("    vars: {{port: {}, bind: 127.0.0.2}}\n", ports[0]),
        format!("    vars: {{port: {}, bind: 127.0.0.1}}\n", ports[1]),
    ];
    let _sshd = login_node(
        dir,
        &cluster,
        "{time: 10m, partition: debug}",
        [&vars[0], &vars[1]],
    );
    let playbook = "name: side\nsteps:\n  - start-server:\n      \
        command: \"{{ rigrun }} sim --profile tiny --port {{ port }} --host {{ bind }}\"\n      \
        url: \"http://{{ bind }}:{{ port }}\"\n  - run-sweep:\n      matrix: {n: [1, 2]}\n      \
        command: >-\n        echo \"{\\\"n\\\": {{ n }}, \\\"job\\\": \\\"${SLURM_JOB_ID:-}\\\", \
        \\\"step\\\": \\\"${SLURM_STEP_ID:-}\\\", \\\"models\\\": $(curl -s http://{{ bind }}:{{ port }}/v1/models | wc -c)}\"\n";
    std::fs::write(dir.join("side.yaml"), playbook).unwrap();
    let out = run_rigrun(
        dir,
        &["run", "side.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let run_dir = crate::common::only_run_dir(&dir.join("runs"));

    let allocation = allocation_of(&run_dir);
    let job = allocation["job_id"].as_str().unwrap().to_string();
    assert_eq!(allocation["node"], cluster.node.as_str(), "{allocation}");
    assert_eq!(allocation["login_node"], cluster.node.as_str(), "{allocation}");
    for record in records(&run_dir) {
        let (host, data) = (record["host"].as_str().unwrap(), &record["metrics"]);
        assert!(
            data["models"].as_u64().unwrap() > 10,
            "the server answered: {record}"
        );
        match host {
            "cluster" => {
                assert_eq!(data["job"], job.as_str(), "{record}");
                assert_ne!(data["step"], "", "{record}");
            }
            _ => assert_eq!(
                (&data["job"], &data["step"]),
                (&"".into(), &"".into()),
                "{record}"
            ),
        }
    }
    let said = notices(&run_dir, "cluster");
    assert!(
        said.iter()
            .any(|n| n.starts_with(&format!("Slurm job {job} runs on node {}", cluster.node))),
        "{said:?}"
    );
    assert!(
        stderr.contains(&format!("Slurm job {job} runs on node")),
        "{stderr}"
    );
    // The facts `show` prints of the Slurm host say which allocation they are of.
    let shown = run_rigrun(dir, &["show", run_dir.to_str().unwrap()]);
    let (shown, _) = text(&shown);
    let slurm_line = format!("  Slurm: job {job} on node {0}, asked from {0}", cluster.node);
    assert!(shown.contains(&slurm_line), "{shown}");
    assert_eq!(
        cluster.live_jobs(),
        Vec::<String>::new(),
        "the allocation was given back"
    );
    for port in ports {
        assert_none_left(&format!("--port {port}"), "the server");
    }
}

/// A partition that does not exist is refused by `sbatch` at once; a request no node can meet
/// waits for ever (`PartitionConfig`): both fail the host at its allocation, in Slurm's words,
/// leave nothing in the queue, and the SSH host beside it runs to its end.
#[test]
fn a_request_slurm_refuses_or_can_never_meet_fails_the_host_in_its_words() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    std::fs::write(
        dir.join("one.yaml"),
        "name: one\nsteps:\n  - shell: {command: \"true\"}\n",
    )
    .unwrap();
    let cases = [
        (
            "{time: 10m, partition: nosuch}",
            "invalid partition specified: nosuch",
        ),
        ("{time: 10m, extra: [--cpus-per-task=64]}", "(PartitionConfig:"),
    ];
    for (i, (slurm, words)) in cases.into_iter().enumerate() {
        let case = dir.join(format!("case{i}"));
        std::fs::create_dir(&case).unwrap();
        let _sshd = login_node(&case, &cluster, slurm, ["", ""]);
        let out = run_rigrun(
            &case,
            &["run", "../one.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{slurm}: {stdout}\n{stderr}");
        let run_dir = crate::common::only_run_dir(&case.join("runs"));
        let hosts = &manifest(&run_dir)["hosts"];
        assert_eq!(hosts["cluster"]["failed_step"], "slurm allocation", "{hosts:#}");
        let error = hosts["cluster"]["error"].as_str().unwrap();
        assert!(error.contains(words), "{slurm}: {error}");
        assert_eq!(hosts["box"]["status"], "ok", "{hosts:#}");
        assert!(stderr.contains(words), "{slurm}: {stderr}");
        assert_eq!(
            cluster.live_jobs(),
            Vec::<String>::new(),
            "{slurm}: nothing left queued"
        );
    }
}

/// Files move through the login node, so a workdir the node does not see is found before any
/// step (when the node's facts are read) and said with what to do; the allocation is given
/// back.
#[test]
fn a_workdir_the_node_does_not_share_fails_the_host_before_any_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let workdir = dir.join("work-cluster");
    let cluster = Cluster::start_hiding(dir, &workdir);
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["", ""]);
    std::fs::write(
        dir.join("one.yaml"),
        "name: one\nsteps:\n  - shell: {command: \"touch ran\"}\n",
    )
    .unwrap();
    let out = run_rigrun(
        dir,
        &["run", "one.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let run_dir = crate::common::only_run_dir(&dir.join("runs"));
    let hosts = &manifest(&run_dir)["hosts"];
    assert_eq!(hosts["cluster"]["failed_step"], "slurm allocation", "{hosts:#}");
    let error = hosts["cluster"]["error"].as_str().unwrap();
    let words = format!(
        "node {} does not see the host's workdir {}",
        cluster.node,
        workdir.display()
    );
    assert!(error.contains(&words), "{error}");
    assert!(error.contains("set the host's `workdir:`"), "{error}");
    assert!(!workdir.join("ran").exists(), "no step ran");
    assert_eq!(hosts["box"]["status"], "ok", "{hosts:#}");
    assert_eq!(cluster.live_jobs(), Vec::<String>::new(), "given back");
}

/// A server that is not there, on the node: the client sees the connection closed unanswered, as
/// through an SSH forward, and the error adds what the node said (`Connection refused`).
#[test]
fn a_server_missing_on_the_node_is_said_in_the_nodes_words() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let port = free_port();
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["", ""]);
    std::fs::write(
        dir.join("verify.yaml"),
        format!("name: verify\nhosts: [cluster]\nsteps:\n  - verify-server: {{url: \"http://127.0.0.1:{port}\", wait: 1s}}\n"),
    )
    .unwrap();
    let out = run_rigrun(
        dir,
        &["run", "verify.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let run_dir = crate::common::only_run_dir(&dir.join("runs"));
    let error = manifest(&run_dir)["hosts"]["cluster"]["error"]
        .as_str()
        .unwrap()
        .to_string();
    let words = format!("on node {}, no connection to 127.0.0.1:{port}: ", cluster.node);
    assert!(
        error.contains(&words) && error.contains("Connection refused"),
        "{error}"
    );
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}

/// The shipped demo playbook, as it is, on a Slurm host beside an SSH host: the simulated
/// server listens on the node's loopback, verify-server and the DCGM telemetry reach it through
/// the node, the script is copied and the results fetched through the login node; every point
/// the KV guard lets run is measured on both hosts, with energy per token on the Slurm host.
#[test]
fn the_demo_playbook_runs_unchanged_on_a_slurm_host() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let host_lines = |port: u16| {
        format!(
            "    dcgm_exporter: http://127.0.0.1:{port}/dcgm-exporter/metrics\n    \
             vars: {{profile: a6000-qwen3.6-27b, model: Qwen/Qwen3.6-27B, port: {port}, kv_capacity_tokens: 150000}}\n"
        )
    };
    let lines = [host_lines(free_port()), host_lines(free_port())];
    let _sshd = login_node(dir, &cluster, "{time: 10m}", [&lines[0], &lines[1]]);
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("playbooks/demo.yaml");
    let out = run_rigrun(
        dir,
        &[
            "run",
            demo.to_str().unwrap(),
            "-i",
            "hosts.yaml",
            "--runs-dir",
            "runs",
            "-q",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let run_dir = crate::common::only_run_dir(&dir.join("runs"));
    for host in ["cluster", "box"] {
        let sweep: Vec<_> = records(&run_dir)
            .into_iter()
            .filter(|r| r["host"] == host && r["step"] == "run-sweep")
            .collect();
        let ok = sweep.iter().filter(|r| r["status"] == "ok").count();
        assert_eq!(ok, 4, "{host}: {sweep:#?}");
        for r in sweep.iter().filter(|r| r["status"] == "ok") {
            let per_joule = r["metrics"]["output_tokens_per_joule"].as_f64();
            assert!(per_joule.is_some_and(|v| v > 0.0), "{host}: {r:#}");
        }
        let fetched = run_dir.join("hosts").join(host).join("fetched");
        let files = crate::common::sh("find", &[fetched.to_str().unwrap(), "-name", "*.json"]);
        assert_eq!(
            files.lines().count(),
            4,
            "{host}: one result file a point: {files}"
        );
    }
    assert_eq!(allocation_of(&run_dir)["node"], cluster.node.as_str());
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}

/// While another job holds the node, the host waits in the queue and says so, with Slurm's
/// reason, on the progress lines and in the journal; once the node is free it runs.
#[test]
fn a_host_waiting_in_the_queue_says_how_long_and_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["", ""]);
    let holder = cluster.run(
        "sbatch",
        &[
            "--parsable",
            "--exclusive",
            "--output=/dev/null",
            "--wrap",
            "exec sleep 600",
        ],
    );
    let holder = holder.trim().to_string();
    crate::common::wait_for(Duration::from_secs(30), "the holder to run", || {
        cluster.state_of(&holder) == "RUNNING"
    });
    std::fs::write(
        dir.join("one.yaml"),
        "name: one\nhosts: [cluster]\nsteps:\n  - shell: {command: \"true\"}\n",
    )
    .unwrap();
    let child = spawn(
        dir,
        &["run", "one.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"],
    );
    let run_dir = wait_for_event(&dir.join("runs"), |e| {
        e["event"] == "host_queued" && e["host"] == "cluster" && e["reason"] == "Resources"
    });
    cluster.run("scancel", &[&holder]);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let job = allocation_of(&run_dir)["job_id"].as_str().unwrap().to_string();
    assert!(
        stderr.contains(&format!(" (Resources), Slurm job {job}")) && stderr.contains("queued "),
        "{stderr}"
    );
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}
