//! YAML mistakes said in words a person uses, each place printed once (`file:line:col:` then
//! the line with a caret), and the two files told apart: a playbook where the inventory goes,
//! or no inventory at all.

use crate::common::*;
use crate::config_errors::{assert_rejected, inventory};

#[test]
fn a_location_is_printed_once_before_its_snippet() {
    let stderr = assert_rejected(
        "name: t\nsteps:\n  - shell: {command: x, retries: many}\n",
        "3:34: `many` is not a whole number of 0 or more",
        "",
    );
    assert_eq!(
        stderr.trim_end(),
        "error: bad.yaml:3:34: `many` is not a whole number of 0 or more\n  |\n3 |   - shell: {command: x, retries: many}\n  |                                  ^"
    );
    assert!(!stderr.contains("at line"), "{stderr}");
    assert!(!stderr.contains("-->"), "{stderr}");
}

#[test]
fn fields_not_indented_under_their_step_kind_are_named() {
    assert_rejected(
        "name: t\nsteps:\n  - shell:\n    command: echo\n",
        "3:10: `shell:` has nothing indented under it: line 4 starts at the same column as `shell`",
        "indent the lines that belong to `shell` further than it",
    );
    let stderr = assert_rejected(
        "name: t\nsteps:\n  - shell:\n      command: echo\n    timeout: 1m\n",
        "5:5: `timeout:` stands beside `shell:`, so YAML reads it as a second key of the step",
        "indent `timeout:` like the other fields of `shell:`",
    );
    assert!(!stderr.contains("enum variant"), "{stderr}");
}

#[test]
fn a_line_between_two_levels_names_the_levels_it_could_take() {
    let stderr = assert_rejected(
        "name: t\nsteps:\n  - shell:\n      command: echo\n     timeout: 1m\n",
        "5:6: `timeout:` is indented by 5 spaces, which lines it up with no key above it",
        "indent it by 6 spaces (like `command:`), 4 spaces (like `shell:`) or 0 spaces (like `steps:`)",
    );
    assert!(!stderr.contains("did not find expected key"), "{stderr}");
}

#[test]
fn a_mapping_where_a_list_belongs_says_so_in_yaml_terms() {
    let stderr = assert_rejected(
        "name: t\nhosts:\n  gpu1: {}\nsteps: []\n",
        "3:3: `hosts:` must be a list (`- item` lines indented under it, or `[a, b]`)",
        "but line 3 below it starts a mapping",
    );
    assert!(!stderr.contains("sequence start"), "{stderr}");
}

#[test]
fn an_inventory_given_as_the_playbook_is_named_as_swapped() {
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(dir.path().join("p.yaml"), "name: t\nsteps: []\n").unwrap();
    let out = run_rigrun(dir.path(), &["check", "hosts.yaml", "-i", "p.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("hosts.yaml: this file is an inventory (its `hosts:` maps host names to their settings), not a playbook, and p.yaml given with -i is a playbook (it has `steps:`): the two are swapped"),
        "{stderr}"
    );
    assert!(stderr.contains("rigrun check PLAYBOOK -i INVENTORY"), "{stderr}");
    assert!(!stderr.contains("sequence start"), "{stderr}");
    let out = run_rigrun(dir.path(), &["plan", "p.yaml", "-i", "p.yaml"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("p.yaml: this file is a playbook (it has `steps:`), not an inventory"),
        "{stderr}"
    );
}

#[test]
fn a_missing_default_inventory_is_named_as_the_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.yaml"), "name: t\nsteps: []\n").unwrap();
    for command in ["check", "plan", "run"] {
        let out = run_rigrun(dir.path(), &[command, "p.yaml"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        let here = dir.path().canonicalize().unwrap();
        assert!(
            stderr.contains(&format!(
                "hosts.yaml: the default inventory is not in {}; pass one with -i FILE",
                here.display()
            )),
            "{command}: {stderr}"
        );
    }
    let out = run_rigrun(dir.path(), &["check", "p.yaml", "-i", "other.yaml"]);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("other.yaml: cannot read the file"), "{stderr}");
}
