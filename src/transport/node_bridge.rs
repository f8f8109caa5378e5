//! A server on a Slurm host's node, reached from here wherever it listens there.
//!
//! The login node reaches the node's network, not its loopback, and servers listen on loopback
//! by default (SGLang, llama.cpp, `rigrun sim`). So an HTTP client for a loopback URL of a Slurm
//! host connects to a Unix socket here, and each connection is carried by a command of its own
//! on the node (`node_bridge.sh`: `srun` into the allocation, bash's `/dev/tcp` to the server),
//! over one channel to the login node. The URL, and so the Host header, stay as the host sees
//! them; a playbook written for a box runs unchanged on a cluster.
//!
//! A connection the node cannot make (the server not up yet, or gone) is closed unanswered, as
//! the SSH forward closes it: to every check a server that is not there looks the same on every
//! kind of host (an answer, even a gateway's 502, would read as a server that is up). What the
//! node said is kept, and [`HttpEndpoint::explain`] adds it to the error's words.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::channel::{closed_input, Channel, Program, Reader};
use super::{http_client, HttpEndpoint, Transport};

/// The script each connection runs on the login node.
const BRIDGE: &str = include_str!("node_bridge.sh");
/// How long an idle connection is kept: each holds one of the host's channels.
const POOL_IDLE: Duration = Duration::from_secs(2);
/// How long one side of a connection waits for the other to end once it has.
const DRAIN: Duration = Duration::from_secs(10);
/// How much of a refused request's head is read before the answer.
const HEAD_CAP: usize = 64 * 1024;

/// An endpoint's listener, stopped with the endpoint; its socket's folder is removed then.
pub struct Bridge {
    task: tokio::task::AbortHandle,
    /// Why the node could not make the latest connection, while that is so.
    refused: Arc<Mutex<Option<String>>>,
    _dir: tempfile::TempDir,
}

impl Bridge {
    /// Why the node could not make the latest connection (none once one was made).
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().ok()?.clone()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Transport {
    /// A client for `url`, whose server listens at `address`:`port` on the allocated node.
    pub(super) fn node_endpoint(
        self: &Arc<Self>,
        url: &str,
        address: &str,
        port: u16,
    ) -> Result<HttpEndpoint> {
        let dir = tempfile::Builder::new()
            .prefix("rigrun-node-")
            .tempdir()
            .context("cannot make a folder for the connection to the Slurm node")?;
        let socket: PathBuf = dir.path().join("server");
        let listener =
            UnixListener::bind(&socket).with_context(|| format!("cannot listen on {}", socket.display()))?;
        let transport = Arc::clone(self);
        let refused = Arc::new(Mutex::new(None));
        let said = Arc::clone(&refused);
        let (address, port) = (address.to_string(), port.to_string());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (transport, address, port) = (Arc::clone(&transport), address.clone(), port.clone());
                let said = Arc::clone(&said);
                tokio::spawn(async move { transport.carry(client, &address, &port, &said).await });
            }
        });
        let client = http_client(|builder| {
            builder
                .unix_socket(socket.clone())
                .pool_idle_timeout(POOL_IDLE)
                .pool_max_idle_per_host(1)
        })?;
        Ok(HttpEndpoint {
            client,
            base_url: url.to_string(),
            bridge: Some(Bridge {
                task: task.abort_handle(),
                refused,
                _dir: dir,
            }),
        })
    }

    /// Carries one client connection to the server through the node; or closes it unanswered,
    /// and puts why the node could not connect into `refused` (emptied by a connection made).
    async fn carry(&self, client: UnixStream, address: &str, port: &str, refused: &Mutex<Option<String>>) {
        let say = |why: Option<String>| {
            if let Ok(mut slot) = refused.lock() {
                *slot = why;
            }
        };
        let Some((job, node)) = self.allocated() else {
            say(Some("the host's Slurm allocation is gone".into()));
            return refuse(client).await;
        };
        let marker = super::wrapper::new_marker();
        let opened = self
            .spawn(Program::Script(BRIDGE), &[job, address, port, &marker])
            .await
            .map_err(|e| format!("{e:#}"));
        let connected = match opened {
            Ok(mut channel) => connected(&mut channel, &marker).await.map(|out| (channel, out)),
            Err(why) => Err(why),
        };
        match connected {
            Ok((channel, from_node)) => {
                say(None);
                pump(client, channel, from_node).await;
            }
            Err(why) => {
                say(Some(format!(
                    "on node {node}, no connection to {address}:{port}: {why}"
                )));
                refuse(client).await;
            }
        }
    }
}

/// Reads the channel's stdout up to the marker line (what a login shell printed before it is
/// dropped) and returns the rest of the stream; or, when it ends first, why, from stderr.
async fn connected(channel: &mut Channel, marker: &str) -> Result<BufReader<Reader>, String> {
    let stdout = std::mem::replace(&mut channel.stdout, Box::new(tokio::io::empty()));
    let mut from_node = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match from_node.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) if line.strip_suffix(b"\n") == Some(marker.as_bytes()) => return Ok(from_node),
            Ok(_) => {}
        }
    }
    let mut stderr = Vec::new();
    let mut from_stderr = (&mut channel.stderr).take(HEAD_CAP as u64);
    let _ = tokio::time::timeout(Duration::from_secs(2), from_stderr.read_to_end(&mut stderr)).await;
    Err(last_word(&String::from_utf8_lossy(&stderr)))
}

/// The last line of a failed bridge's stderr that is not srun's own `task 0: Exited with exit
/// code 111` (bash's, like `/dev/tcp/127.0.0.1/30000: Connection refused`), else srun's last.
fn last_word(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let own = lines.iter().rev().find(|l| !l.starts_with("srun: "));
    own.or(lines.last())
        .map_or("the command on the node ended without a word", |l| l)
        .to_string()
}

/// Copies bytes both ways until each side has ended (the other given [`DRAIN`] once one has).
async fn pump(client: UnixStream, mut channel: Channel, mut from_node: BufReader<Reader>) {
    let (mut client_read, mut client_write) = client.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut channel.stdin).await;
        // The node's `cat` reads its end: the connection to the server closes.
        channel.stdin = closed_input();
    };
    let down = async {
        let _ = tokio::io::copy_buf(&mut from_node, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        () = &mut up => { let _ = tokio::time::timeout(DRAIN, &mut down).await; }
        () = &mut down => { let _ = tokio::time::timeout(DRAIN, &mut up).await; }
    }
}

/// Closes the client's connection unanswered once its request's head has arrived (closed before,
/// the client could see a reset rather than a connection closed before an answer).
async fn refuse(mut client: UnixStream) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_head = async {
        while head.len() < HEAD_CAP && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), read_head).await;
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_reason_is_its_own_last_word_not_sruns() {
        let stderr = "bash: connect: Connection refused\nbash: line 1: /dev/tcp/127.0.0.1/9: Connection refused\nsrun: error: n7: task 0: Exited with exit code 111\n";
        assert_eq!(
            last_word(stderr),
            "bash: line 1: /dev/tcp/127.0.0.1/9: Connection refused"
        );
        let srun_only =
            "srun: error: Unable to create step for job 12: Job/step already completing or completed\n";
        assert_eq!(last_word(srun_only), srun_only.trim());
        assert_eq!(last_word(""), "the command on the node ended without a word");
    }
}
