//! `rigrun run --resume` over a real sshd on loopback: a sweep stopped by SIGTERM and by
//! SIGKILL mid-point, then resumed to its end.

use crate::common::{ClientKey, Sshd};
use crate::resume_support::interrupt_then_resume;

#[test]
fn sigterm_and_sigkill_mid_sweep_over_ssh_then_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = ClientKey::new(dir.path());
    let sshd = Sshd::start(dir.path(), "a", &key);
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("a", &key, &known_hosts, &dir.path().join("work-a"), "");
    std::fs::write(dir.path().join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    for signal in ["TERM", "KILL"] {
        interrupt_then_resume(dir.path(), signal);
    }
}
