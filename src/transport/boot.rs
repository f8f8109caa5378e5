//! A host's boot id as rigrun last saw it: from the facts when it connected, then from what
//! `job.sh` says in the round trips rigrun makes anyway (a lease renewed, a job followed again
//! after a lost connection). A new one means the host rebooted: everything rigrun ran there is
//! gone (its files stay). Whoever watches is told once per reboot (see [`Reboot`]).

use std::sync::{Arc, Mutex};

/// The host rebooted: its boot id was `before`, it is `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reboot {
    pub before: String,
    pub now: String,
}

impl Reboot {
    /// What a reboot noticed during the run means, in words.
    pub fn during_run(&self, host: &str) -> String {
        format!(
            "{host} rebooted (its boot id changed): the commands rigrun ran there died with it \
             (their files in the workdir stay, and are not their results); the points that were \
             running are lost and run again, a server rigrun started is gone"
        )
    }

    /// What a reboot found when a resumed run connects again, in words.
    pub fn since_last_session(&self, host: &str) -> String {
        format!(
            "{host} rebooted since the run was last connected to it (its boot id changed): the \
             commands rigrun ran there died with it (their files in the workdir stay, and are not \
             their results); the points that were running are lost and run again"
        )
    }
}

/// Who is told of a reboot.
pub type OnReboot = Arc<dyn Fn(&Reboot) + Send + Sync>;

/// The boot id last seen and who to tell when it changes.
#[derive(Default)]
pub(super) struct BootWatch {
    state: Mutex<(Option<String>, Option<OnReboot>)>,
}

impl BootWatch {
    /// Starts from `boot_id` (the facts'), telling `on_reboot` of each change from there.
    pub fn watch(&self, boot_id: Option<String>, on_reboot: OnReboot) {
        if let Ok(mut state) = self.state.lock() {
            *state = (boot_id, Some(on_reboot));
        }
    }

    /// The boot id last seen.
    pub fn current(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.0.clone())
    }

    /// The host said its boot id is `now`: a change from the one last seen is a reboot, told
    /// (once: the next to say `now` finds it seen). Returns it, if it is one.
    pub fn saw(&self, now: &str) -> Option<Reboot> {
        if now.is_empty() {
            return None;
        }
        let (reboot, on_reboot) = {
            let mut state = self.state.lock().ok()?;
            let before = state.0.replace(now.to_string())?;
            if before == now {
                return None;
            }
            let reboot = Reboot {
                before,
                now: now.to_string(),
            };
            (reboot, state.1.clone())
        };
        if let Some(tell) = on_reboot {
            tell(&reboot);
        }
        Some(reboot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_boot_id_is_told_once() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let watch = BootWatch::default();
        let sink = told.clone();
        watch.watch(
            Some("a".into()),
            Arc::new(move |r: &Reboot| sink.lock().unwrap().push(r.clone())),
        );
        assert_eq!(watch.saw("a"), None, "the same boot");
        assert_eq!(watch.saw(""), None, "a host that cannot say");
        let reboot = watch.saw("b").expect("a reboot");
        assert_eq!((reboot.before.as_str(), reboot.now.as_str()), ("a", "b"));
        assert_eq!(watch.saw("b"), None, "told once");
        assert_eq!(watch.current().as_deref(), Some("b"));
        assert_eq!(told.lock().unwrap().len(), 1);
        assert!(reboot
            .during_run("gpu")
            .starts_with("gpu rebooted (its boot id changed)"));
    }

    #[test]
    fn without_a_boot_id_from_the_facts_the_first_seen_is_no_reboot() {
        let watch = BootWatch::default();
        assert_eq!(watch.saw("a"), None);
        assert_eq!(watch.current().as_deref(), Some("a"));
        assert!(watch.saw("b").is_some());
    }
}
