//! Which cipher rigrun's connections prefer. OpenSSH puts chacha20-poly1305 first because it is
//! constant-time without AES instructions; on a CPU that has them, AES-GCM moves the same bytes
//! with far less CPU on both ends (scp of 1 GiB over loopback here: 2.5–3.0 s with chacha20,
//! 1.7–2.4 s with AES-GCM), which is what a fetch of big result files spends its time on.
//!
//! rigrun only reorders: when this CPU has AES and carry-less multiply, the inventory sets no
//! `Ciphers`, and `ssh -G` shows the configuration leaves OpenSSH's default list untouched, the
//! AES-GCM entries of that same list go first. A list the user chose (`~/.ssh/config`,
//! `/etc/ssh/ssh_config`, `ssh_options`) is used as it is.

use std::time::Duration;

use tokio::sync::OnceCell;

/// `ssh -G` only reads configuration; anything slower is stuck (a `Match exec` that hangs).
const QUERY_DEADLINE: Duration = Duration::from_secs(5);

/// The `-o Ciphers=…` option to add for a host reached with `config_args` (ssh's options, no
/// master flags) at `address`, or none to leave ssh's choice alone.
pub async fn preference(config_args: &[String], address: &str) -> Option<String> {
    if !has_aes_instructions() {
        return None;
    }
    static DEFAULT: OnceCell<Option<String>> = OnceCell::const_new();
    // Both queries at once: each is an `ssh` process on the connection's path.
    let (default, effective) = tokio::join!(
        DEFAULT.get_or_init(|| ciphers_of(&["-F", "/dev/null"], "rigrun-default")),
        ciphers_of(config_args, address)
    );
    let (default, effective) = (default.as_deref()?, effective?);
    if effective != default {
        tracing::debug!("keeping the configured ciphers for {address}: {effective}");
        return None;
    }
    gcm_first(&effective).map(|list| format!("Ciphers={list}"))
}

/// The list with its AES-GCM ciphers moved to the front (their order and the others' kept), or
/// none when there is none or they already lead.
fn gcm_first(list: &str) -> Option<String> {
    let (gcm, rest): (Vec<&str>, Vec<&str>) = list.split(',').partition(|c| c.contains("-gcm@"));
    let leads = list.split(',').next().is_some_and(|c| c.contains("-gcm@"));
    if gcm.is_empty() || leads {
        return None;
    }
    Some([gcm, rest].concat().join(","))
}

/// The `ciphers` line of `ssh -G` with these options for this host.
async fn ciphers_of<S: AsRef<std::ffi::OsStr>>(args: &[S], address: &str) -> Option<String> {
    let output = tokio::time::timeout(
        QUERY_DEADLINE,
        tokio::process::Command::new("ssh")
            .args(args)
            .arg("-G")
            .arg("--")
            .arg(address)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()
    .filter(|o| o.status.success())?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("ciphers "))
        .map(|l| l.trim().to_string())
}

fn has_aes_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcm_ciphers_move_to_the_front_and_nothing_is_added_or_lost() {
        let default = "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,\
                       aes128-gcm@openssh.com,aes256-gcm@openssh.com";
        assert_eq!(
            gcm_first(default).unwrap(),
            "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,\
             aes128-ctr,aes192-ctr,aes256-ctr"
        );
        assert_eq!(
            gcm_first("aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"),
            None
        );
        assert_eq!(gcm_first("chacha20-poly1305@openssh.com,aes128-ctr"), None);
    }

    #[tokio::test]
    async fn a_configured_cipher_list_is_left_alone() {
        // `-o Ciphers=…` is configuration as much as ~/.ssh/config is: ssh -G shows it, so the
        // effective list differs from the default and rigrun adds nothing.
        let args = vec![
            "-o".into(),
            "Ciphers=chacha20-poly1305@openssh.com,aes128-gcm@openssh.com".into(),
        ];
        assert_eq!(preference(&args, "127.0.0.1").await, None);
    }

    #[tokio::test]
    async fn the_default_list_gets_gcm_first_where_the_cpu_has_aes() {
        let got = preference(&[], "127.0.0.1").await;
        if has_aes_instructions() {
            let list = got.expect("this CPU has AES: the default list should be reordered");
            assert!(list.starts_with("Ciphers=aes128-gcm@openssh.com,"), "{list}");
            assert!(list.contains("chacha20-poly1305@openssh.com"), "{list}");
        } else {
            assert_eq!(got, None);
        }
    }
}
