//! `rigrun check --connect`: every host reached in parallel, its facts gathered in the one round
//! trip a run makes, and the link closed again; nothing is run.

use tokio::task::JoinSet;

use super::host::gather_facts;
use crate::config::Config;
use crate::facts::HostFacts;
use crate::transport::Transport;

/// Each host of the configuration, in its order, with its facts or why it could not be reached.
pub async fn reach(config: &Config) -> anyhow::Result<Vec<(String, Result<HostFacts, String>)>> {
    let control_dir = tempfile::Builder::new().prefix("rigrun-").tempdir_in("/tmp")?;
    let mut tasks = JoinSet::new();
    for (i, host) in config.hosts.iter().enumerate() {
        let (host, spec) = (host.clone(), config.host(host).clone());
        let (policy, dir) = (config.inventory.known_hosts, control_dir.path().to_path_buf());
        tasks.spawn(async move {
            let transport = Transport::connect(&host, &spec, policy, &dir).await;
            let facts = match transport {
                Ok(t) => {
                    let facts = gather_facts(&t).await;
                    t.close().await;
                    facts
                }
                Err(e) => Err(e),
            };
            (i, host, facts.map_err(|e| format!("{e:#}")))
        });
    }
    let mut reached: Vec<_> = tasks.join_all().await;
    reached.sort_by_key(|(i, ..)| *i);
    Ok(reached
        .into_iter()
        .map(|(_, host, facts)| (host, facts))
        .collect())
}
