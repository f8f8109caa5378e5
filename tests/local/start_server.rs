//! `start-server` where another server already holds the URL: refused before launch, naming
//! what answers there, rather than reported ok while the other server would be measured.

use crate::common::*;
use crate::sim_support::Sim;

#[tokio::test(flavor = "multi_thread")]
async fn start_server_refuses_a_url_another_server_already_answers_at() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let other = Sim::start("tiny", &[]);
    let port = other.base.rsplit(':').next().unwrap().trim_end_matches('/');
    one_local_host(dir, "", &format!("port: {port}"));
    // The same profile, so the same model name: verify-server alone could not tell them apart.
    let playbook = r#"
name: port-taken
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile tiny --port {{ port }}"
      url: "http://127.0.0.1:{{ port }}"
  - verify-server: {url: "http://127.0.0.1:{{ port }}"}
"#;
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let out = tokio::task::block_in_place(|| run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let expected = format!("something already answers at http://127.0.0.1:{port} (serving ");
    assert!(stderr.contains(&expected), "{stderr}");
    let run_dir = only_run_dir(&dir.join("runs"));
    let steps = &manifest(&run_dir)["hosts"]["h"]["steps"];
    assert_eq!(steps[0]["status"], "failed", "{steps:#}");
    assert!(
        steps[0]["error"].as_str().unwrap().contains(&expected),
        "{steps:#}"
    );
    assert_eq!(
        steps.as_array().unwrap().len(),
        1,
        "nothing after it ran: {steps:#}"
    );
    // The server that was there first is left as it was.
    let (status, models) = other.get("/v1/models").await;
    assert_eq!(status, 200, "{models}");
}
