//! `rigrun sim` command line: listing profiles, bad profile files, model override, predictions.

use crate::sim_support::{path_str, profile_yaml, rigrun, Sim};
use serde_json::Value;

/// Runs `rigrun sim --profile <file with source>`; asserts it fails cleanly; returns stderr.
fn rejected_profile(source: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, source).unwrap();
    let out = rigrun(&["sim", "--profile", path_str(&path), "--port", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad profile is invalid input: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stderr, path_str(&path).to_string())
}

#[test]
fn lists_the_builtin_profiles() {
    let out = rigrun(&["sim", "--list-profiles"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for (name, model) in [
        (
            "blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4",
            "Qwen/Qwen3.5-397B-A17B-NVFP4",
        ),
        ("a6000-qwen3.6-27b", "Qwen/Qwen3.6-27B"),
        ("tiny", "rigrun/tiny"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        assert!(line.contains(model), "{line}");
    }
}

#[test]
fn bad_profile_files_name_file_line_and_column() {
    let good = profile_yaml(1000, 100, 2.0, 1000, 64);
    let cases = [
        (
            good.replace(
                "max_running_requests: 16",
                "max_running_requests: 16\nturbo: true",
            ),
            ":5:1",
        ),
        (good.replace("max_model_len: 100", "max_model_len: many"), ":3:16"),
        (
            good.replace("kv_capacity_tokens: 1000", "kv_capacity_tokens: 10"),
            ":5:21",
        ),
        (
            good.replace("batch_ms: [[1, 2]]", "batch_ms: [[2, 2], [1, 3]]"),
            ":8:13",
        ),
        (good.replace("model: test/model\n", ""), ":10:1"),
        ("model: x\ndescription: \"open\n".to_string(), ":2:14"),
        (format!("{good}model: again\n"), ":12:1"),
    ];
    for (source, position) in cases {
        let (stderr, path) = rejected_profile(&source);
        assert!(
            stderr.contains(&format!("{path}{position}")),
            "expected {path}{position} in:\n{stderr}"
        );
    }
}

#[test]
fn unknown_profiles_and_missing_files_fail_cleanly() {
    let out = rigrun(&["sim", "--profile", "huge-gpu"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("unknown profile 'huge-gpu'") && stderr.contains("tiny"),
        "{stderr}"
    );
    let out = rigrun(&["sim", "--profile", "/nonexistent/profile.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("/nonexistent/profile.yaml"), "{stderr}");
}

#[tokio::test]
async fn model_override_is_served() {
    let sim = Sim::start("tiny", &["--model", "my/model"]);
    let (_, body) = sim.get("/v1/models").await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["data"][0]["id"], "my/model");
    let (status, _) = sim
        .post(
            "/v1/completions",
            r#"{"model": "my/model", "prompt": "x", "max_tokens": 1}"#,
        )
        .await;
    assert_eq!(status, 200);
}

#[test]
fn predictions_are_json_lines_per_level() {
    let out = rigrun(&[
        "sim",
        "--profile",
        "tiny",
        "--predict",
        "1,8",
        "--input-len",
        "100",
        "--output-len",
        "100",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["max_concurrency"], 8);
    assert!(
        lines[1]["output_throughput"].as_f64().unwrap() > lines[0]["output_throughput"].as_f64().unwrap()
    );
    let out = rigrun(&[
        "sim",
        "--profile",
        "tiny",
        "--predict",
        "1",
        "--input-len",
        "4000",
        "--output-len",
        "1000",
    ]);
    assert!(!out.status.success());
}
