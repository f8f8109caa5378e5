//! Why ssh could not connect, in one sentence that says what to do: its own last words read,
//! with the commands that fix a host key typed out for this host.

/// `ssh-keygen -R` and `ssh-keyscan` as they must be typed for this host: `[address]:port` for
/// a port other than 22, `-f FILE` when the inventory names its own known_hosts file.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCommands {
    pub remove: String,
    pub add: String,
}

impl KeyCommands {
    pub fn new(address: &str, port: Option<u16>, known_hosts: Option<&str>) -> KeyCommands {
        let name = match port.filter(|&p| p != 22) {
            Some(port) => format!("[{address}]:{port}"),
            None => address.to_string(),
        };
        let file = known_hosts.unwrap_or("~/.ssh/known_hosts");
        let quoted = crate::config::template::shell_quote(&name);
        KeyCommands {
            remove: match known_hosts {
                Some(file) => format!(
                    "ssh-keygen -R {quoted} -f {}",
                    crate::config::template::shell_quote(file)
                ),
                None => format!("ssh-keygen -R {quoted}"),
            },
            add: format!(
                "ssh-keyscan -p {} {address} >> {}",
                port.unwrap_or(22),
                crate::config::template::shell_quote(file)
            ),
        }
    }
}

/// Turns ssh's own words into one sentence that says what went wrong and what to do.
pub fn explain_ssh_failure(target: &str, keys: &KeyCommands, log: &str) -> String {
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let has = |s: &str| log.contains(s);
    if has("REMOTE HOST IDENTIFICATION HAS CHANGED") {
        format!(
            "host key verification failed for {target}: its key has CHANGED since it was recorded in known_hosts. \
             If the host was reinstalled, remove the old key ({}) and connect again; otherwise \
             someone may be intercepting the connection",
            keys.remove
        )
    } else if has("Host key verification failed")
        || has("No ED25519 host key is known")
        || has("host key is known")
    {
        format!(
            "host key verification failed for {target}: its key is not in known_hosts. Check the key, then add it \
             ({}), or set `known_hosts: accept-new` in the inventory to record keys seen for the first time",
            keys.add
        )
    } else if has("Permission denied") {
        format!(
            "authentication refused by {target} ({last}): check `user:` and `identity_file:` in the inventory, \
             or load the key into ssh-agent; rigrun never prompts for passwords"
        )
    } else if has("Connection refused") {
        format!("connection refused by {target}: nothing listens on that port; is sshd running?")
    } else if has("Could not resolve hostname") || has("Name or service not known") {
        format!("cannot resolve the address of {target}: check `address:` in the inventory or ~/.ssh/config")
    } else if has("timed out") {
        format!("connection to {target} timed out: the host is down or a firewall drops the traffic")
    } else if last.is_empty() {
        format!("ssh could not connect to {target} (it said nothing)")
    } else {
        format!("ssh could not connect to {target}: {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explains_the_common_failures() {
        let t = "root@gpu:22";
        let keys = KeyCommands::new("gpu", None, None);
        let explain = |log: &str| explain_ssh_failure(t, &keys, log);
        assert!(explain("Host key verification failed.\r\n").contains("accept-new"));
        assert!(explain(
            "@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @\nHost key verification failed."
        )
        .contains("CHANGED"));
        assert!(explain("root@gpu: Permission denied (publickey).").contains("identity_file"));
        assert!(explain("ssh: connect to host gpu port 22: Connection refused").contains("sshd"));
        assert!(explain("odd\n").ends_with("odd"));
    }

    #[test]
    fn key_commands_name_the_port_and_the_file_in_use() {
        let plain = KeyCommands::new("gpu.lab", None, None);
        assert_eq!(plain.remove, "ssh-keygen -R gpu.lab");
        assert_eq!(plain.add, "ssh-keyscan -p 22 gpu.lab >> ~/.ssh/known_hosts");
        let custom = KeyCommands::new("10.0.0.7", Some(2222), Some("/etc/rigrun/known hosts"));
        assert_eq!(
            custom.remove,
            "ssh-keygen -R '[10.0.0.7]:2222' -f '/etc/rigrun/known hosts'"
        );
        assert_eq!(
            custom.add,
            "ssh-keyscan -p 2222 10.0.0.7 >> '/etc/rigrun/known hosts'"
        );
        assert_eq!(KeyCommands::new("h", Some(22), None).remove, "ssh-keygen -R h");
    }
}
